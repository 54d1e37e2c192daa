"""The verdict memo on Windows, through a fake of its Windows seam (``_binary.winapi``).

The memo's own logic (fingerprint, states, replay, what it refuses) runs as on Windows; only
what Windows answers (loaded modules, registry values, registered folders, LoadLibraryExW)
is the fake's. The real thing runs under Wine in ``tests/e2e/test_memo_wine.py``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from torchguard._binary import memo, winapi
from torchguard._frontends import api as _api
from torchguard._platforms.windows import register as _register
from torchguard._report.report import DllDirectory, PreloadRecord, Report

LONG_AGO = time.time() - 3600


class FakeWindows:
    """What the seam answers; each test changes one thing and expects a miss."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.system32 = root / "System32"
        self.app = root / "Python311"
        self.loaded = [str(self.app / "python.exe"), str(self.system32 / "ntdll.dll")]
        self.known: list[object] = [("ntdll", "ntdll.dll", 1)]
        self.sac: object = (0, 4)
        self.adapters: object = [("0000", [("DriverDesc", "Basic Display", 1)])]
        self.registered: list[object] = []
        self.kmp = False
        self.calls: list[tuple[str, str]] = []
        self.fail: str | None = None

    def add_dll_directory(self, path: str) -> object:
        self.calls.append(("register", path))
        if self.fail == "register":
            raise FileNotFoundError(path)
        self.registered.append(path)
        return f"handle {path}"

    def preload(self, path: str) -> bool:
        self.calls.append(("preload", path))
        self.loaded.append(path)
        return self.fail != "preload"

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        answers: dict[str, Callable[..., object]] = {
            "loaded_paths": lambda: list(self.loaded),
            "system_directory": lambda: str(self.system32),
            "known_dlls": lambda: self.known,
            "smart_app_control": lambda: self.sac,
            "display_adapters": lambda: self.adapters,
            "registered_dirs": lambda: list(self.registered),
            "kmp_marker": lambda: self.kmp,
            "windows_version": lambda: (10, 0, 22631, 2, "", (10, 0, 22631)),
            "add_dll_directory": self.add_dll_directory,
            "preload": self.preload,
        }
        for name, answer in answers.items():
            monkeypatch.setattr(winapi, name, answer)
        monkeypatch.setattr(memo, "on_windows", lambda: True)


def _old(*paths: Path) -> None:
    for path in paths:
        os.utime(path, (LONG_AGO, LONG_AGO))


@pytest.fixture
def windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeWindows]:
    fake = FakeWindows(tmp_path)
    fake.install(monkeypatch)
    for variable in ("TORCHGUARD_CACHE_DIR", "TORCHGUARD_REPORT", "TORCHGUARD", "TORCHGUARD_CACHE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "Local"))
    (tmp_path / "torch" / "lib").mkdir(parents=True)
    (tmp_path / "torch" / "lib" / "c10.dll").write_bytes(b"MZ")
    for folder in ("Path1", "extra", "System32", "Python311"):
        (tmp_path / folder).mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "Path1"))
    (tmp_path / "work").mkdir()  # the current folder is watched: the memo lives elsewhere
    monkeypatch.chdir(tmp_path / "work")
    _old(tmp_path / "torch" / "lib" / "c10.dll", tmp_path / "torch" / "lib", tmp_path / "torch")
    _old(*(tmp_path / folder for folder in ("Path1", "extra", "System32", "Python311")))
    _old(tmp_path / "work")
    monkeypatch.setattr(memo, "pending", None)
    monkeypatch.setattr(memo, "passed", False)
    monkeypatch.setattr(memo, "RACY", 0.0)  # sys.path's test folder may have just been compiled
    monkeypatch.setattr(memo, "replayed", [])
    yield fake


def _steps(fake: FakeWindows) -> list[tuple[str, str]]:
    return [("register", str(fake.root / "extra")), ("preload", str(fake.root / "extra" / "a.dll"))]


def _memoize(fake: FakeWindows) -> None:
    """A miss, then a clean analysis that read c10.dll and took two steps."""
    assert memo.check() is False
    fake.loaded.append(str(fake.root / "DLLs" / "_hashlib.pyd"))  # the analysis's own import
    assert memo.save([str(fake.root / "torch" / "lib" / "c10.dll")], _steps(fake)) is True
    fake.loaded.pop()


def test_the_memo_lives_under_localappdata_as_platformdirs_names_the_cache(
    windows: FakeWindows, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = Path(memo.memo_file() or "")
    assert path.parent == windows.root / "Local" / "torchguard" / "Cache" / memo.FOLDER
    monkeypatch.delenv("LOCALAPPDATA")
    assert memo.memo_file() is None  # platformdirs would ask the shell: no memo
    monkeypatch.setenv("TORCHGUARD_CACHE_DIR", str(windows.root / "mine"))
    assert Path(memo.memo_file() or "").parent == windows.root / "mine" / memo.FOLDER


def test_a_hit_replays_the_registrations_and_preloads_in_order(windows: FakeWindows) -> None:
    _memoize(windows)
    assert memo.check() is True
    assert windows.calls == _steps(windows)
    assert memo.passed
    assert memo.replayed == [(str(windows.root / "extra"), f"handle {windows.root / 'extra'}")]


def test_a_later_ensure_does_not_register_what_the_replay_registered(
    windows: FakeWindows, monkeypatch: pytest.MonkeyPatch
) -> None:
    _memoize(windows)
    assert memo.check() is True
    monkeypatch.setattr(_register, "_handles", {})
    monkeypatch.setattr(os, "add_dll_directory", windows.add_dll_directory, raising=False)
    monkeypatch.setattr(_register, "ntpath", os.path)  # host paths stand for Windows ones
    other = windows.root / "Path1"
    assert _register.register([str(windows.root / "extra"), str(other)]) == [str(other)]
    assert windows.calls[-1] == ("register", str(other))


def _registry(fake: FakeWindows) -> None:
    fake.known = [*fake.known, ("evil", "evil.dll", 1)]


def _sac(fake: FakeWindows) -> None:
    fake.sac = (1, 4)


def _adapter(fake: FakeWindows) -> None:
    fake.adapters = [("0000", [("DriverDesc", "NVIDIA GeForce RTX 5090", 1)])]


def _loaded_before(fake: FakeWindows) -> None:
    fake.loaded.append(str(fake.root / "elsewhere" / "libiomp5md.dll"))


def _registered_before(fake: FakeWindows) -> None:
    fake.registered.append(str(fake.root / "Path1"))


def _kmp(fake: FakeWindows) -> None:
    fake.kmp = True


def _path_variable(fake: FakeWindows) -> None:
    os.environ["PATH"] += os.pathsep + str(fake.root / "extra")


def _path_folder(fake: FakeWindows) -> None:
    (fake.root / "Path1" / "cudnn64_9.dll").write_bytes(b"MZ")


def _dll_rewritten(fake: FakeWindows) -> None:
    (fake.root / "torch" / "lib" / "c10.dll").write_bytes(b"MZ!")


def _dll_removed(fake: FakeWindows) -> None:
    (fake.root / "torch" / "lib" / "c10.dll").unlink()


@pytest.mark.parametrize(
    "change",
    [
        _registry,
        _sac,
        _adapter,
        _loaded_before,
        _registered_before,
        _kmp,
        _path_variable,
        _path_folder,
        _dll_rewritten,
        _dll_removed,
    ],
    ids=lambda f: f.__name__,
)
def test_each_change_analyses_and_replays_nothing(
    windows: FakeWindows, monkeypatch: pytest.MonkeyPatch, change: Callable[[FakeWindows], None]
) -> None:
    _memoize(windows)
    monkeypatch.setenv("PATH", os.environ["PATH"])  # restored after the test
    change(windows)
    assert memo.check() is False
    assert windows.calls == [] and not memo.passed


@pytest.mark.parametrize("step", ["register", "preload"])
def test_a_failing_replay_analyses_and_is_not_memoized(windows: FakeWindows, step: str) -> None:
    _memoize(windows)
    windows.fail = step
    assert memo.check() is False
    assert memo.pending is None  # half replayed: what the analysis sees is not memoized
    assert memo.save([], _steps(windows)) is False


def _crlf(text: bytes) -> bytes:
    return text.replace(b"\n", b"\r\n")


def _action_first(text: bytes) -> bytes:
    lines = text.split(b"\n")
    action = next(i for i, line in enumerate(lines) if line.startswith(b"register "))
    state = next(i for i, line in enumerate(lines) if line.startswith(b"state "))
    lines.insert(state, lines.pop(action))
    return b"\n".join(lines)


def _unknown_action(text: bytes) -> bytes:
    return text.replace(b"\npreload ", b"\nexecute ", 1)


def _foreign(text: bytes) -> bytes:
    return text.replace(b"\nknown-dlls ", b"\nknown-dlls [] ", 1)


def _truncated(text: bytes) -> bytes:
    return text[: len(text) // 2]


@pytest.mark.parametrize(
    "damage",
    [_crlf, _action_first, _unknown_action, _foreign, _truncated],
    ids=lambda f: f.__name__,
)
def test_a_damaged_or_foreign_memo_is_never_trusted(
    windows: FakeWindows, damage: Callable[[bytes], bytes]
) -> None:
    _memoize(windows)
    path = Path(memo.memo_file() or "")
    path.write_bytes(damage(path.read_bytes()))
    assert memo.check() is False
    assert windows.calls == []


@pytest.mark.parametrize(
    ("loaded_meanwhile", "kept"),
    [
        ("DLLs/_ssl.pyd", True),  # an extension module: no DLL names it
        ("System32/bcrypt.dll", True),  # a search finds it there too
        ("Python311/python3.dll", True),  # the application's folder
        ("extra/dep.dll", True),  # beside the preloaded DLL: the replay loads it again
        ("DLLs/libcrypto-3.dll", False),  # found only through _hashlib's own folder
    ],
)
def test_a_dll_the_analysis_loaded_outside_the_search_leaves_no_memo(
    windows: FakeWindows, loaded_meanwhile: str, kept: bool
) -> None:
    assert memo.check() is False
    windows.loaded.append(str(windows.root / loaded_meanwhile))
    assert memo.save([], _steps(windows)) is kept


def test_the_guard_memoizes_its_registrations_and_preloads_after_a_clean_run(
    windows: FakeWindows, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ensure()``'s Windows path: the folders it registered and the DLLs it preloaded,
    in that order, become the memo's steps; a failed preload leaves no memo."""
    extra, dll = str(windows.root / "extra"), str(windows.root / "extra" / "a.dll")
    report = Report(
        dll_directories=(
            DllDirectory(str(windows.root / "torch" / "lib"), "torch", by_torch=True),
            DllDirectory(extra, "nvidia", by_torch=False),
        ),
        preloads=(PreloadRecord(dll, "openmp", "TORCHGUARD_OPENMP=keep"),),
    )
    monkeypatch.setattr(_api, "_live_report", lambda: report)
    registered: list[list[str]] = []
    monkeypatch.setattr(
        _register, "register", lambda paths: registered.append(list(paths)) or [extra]
    )
    import torchguard._platforms.windows.live as live

    def preload(path: str) -> None:  # live.preload raises what LoadLibraryExW failed with
        if not windows.preload(path):
            raise OSError(126, "The specified module could not be found")

    monkeypatch.setattr(live, "preload", preload)
    assert memo.check() is False
    assert _api._prepare_windows().preloads[0].done
    assert registered == [[extra]]
    text = Path(memo.memo_file() or "").read_text(encoding="utf-8").splitlines()
    assert [line for line in text if line.split(" ")[0] in memo.ACTIONS] == [
        f"register {extra}",
        f"preload {dll}",
    ]
    windows.calls.clear()
    windows.loaded.remove(dll)  # as in the next process
    assert memo.check() is True
    assert windows.calls == [("register", extra), ("preload", dll)]

    Path(memo.memo_file() or "").unlink()
    windows.fail = "preload"
    assert memo.check() is False
    assert _api._prepare_windows().preloads[0].error is not None
    assert not Path(memo.memo_file() or "").exists()


SPIED = ("stat", "lstat", "listdir", "scandir", "access", "readlink")


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_the_memo_watches_every_path_a_windows_analysis_reads(
    windows: FakeWindows, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm: bool
) -> None:
    """The Windows analysis (an offline install standing in for the live one) under a spy of
    every file-system call: each path it touched is watched by the memo it leaves (its own
    cache, Python's and torchguard's own files, a path only ``lstat``-ed by ``realpath``,
    and an absent name below a watched folder aside)."""
    import types

    from fakes import FakeTorch, system32

    import torchguard._platforms.windows.live as live
    from torchguard._platforms.windows.system import offline_windows

    site = FakeTorch().write(tmp_path / "site")
    s32 = system32(tmp_path / "s32")
    for root in (site, s32):
        for folder, _, files in os.walk(root):
            _old(Path(folder), *(Path(folder) / name for name in files))
    cache = tmp_path / "cache"
    monkeypatch.setenv("TORCHGUARD_CACHE_DIR", str(cache))
    monkeypatch.setattr(_api, "sys", types.SimpleNamespace(platform="win32", modules=sys.modules))
    monkeypatch.setattr(
        live, "live_windows", lambda: offline_windows([str(site)], system32_dirs=[str(s32)])
    )
    if warm:
        _api._live_report()
    assert memo.check() is False
    touched: dict[str, set[str]] = {}

    def spy(name: str, real: Callable[..., object]) -> Callable[..., object]:
        def call(*args: object, **kwargs: object) -> object:
            if args and isinstance(args[0], (str, bytes, os.PathLike)):
                where = os.path.abspath(os.fsdecode(args[0]))
                touched.setdefault(where, set()).add(name)
            return real(*args, **kwargs)

        return call

    import builtins

    for name in SPIED:
        monkeypatch.setattr(os, name, spy(name, getattr(os, name)))
    monkeypatch.setattr(builtins, "open", spy("open", builtins.open))
    report = _api._prepare_windows()
    monkeypatch.undo()  # the spies off before the memo is read
    assert not report.blocking
    text = Path(str(cache / memo.FOLDER), os.listdir(cache / memo.FOLDER)[0]).read_text("utf-8")
    watched = {line.split(" ", 2)[2] for line in text.splitlines() if line.startswith("state ")}
    watched |= {os.path.abspath(path) for path in watched}
    own = (str(cache), sys.base_prefix, sys.prefix, str(Path(memo.__file__).parents[1]))

    def present(path: str) -> str:
        while not os.path.lexists(path):  # an absent name shows in its nearest folder's state
            path = os.path.dirname(path)
        return path

    unwatched = sorted(
        path
        for path, calls in touched.items()
        if path not in watched
        and present(path) not in watched
        and not path.startswith(own)
        and calls != {"lstat"}
    )
    assert unwatched == [], "\n".join(unwatched)
    assert str(site / "torch" / "lib" / "c10.dll") in watched  # the check can fail


@pytest.mark.skipif(sys.platform == "win32", reason="off Windows only")
def test_the_windows_seam_refuses_off_windows() -> None:
    """Off Windows the memo never asks it (``memo.on_windows()``); asked anyway, it refuses
    rather than answer something."""
    for call in (
        winapi.loaded_paths,
        winapi.module_paths,
        winapi.system_directory,
        winapi.kmp_marker,
        winapi.known_dlls,
        winapi.smart_app_control,
        winapi.display_adapters,
        winapi.registered_dirs,
        winapi.windows_version,
        lambda: winapi.add_dll_directory("C:\\x"),
        lambda: winapi.preload("C:\\x.dll"),
        lambda: winapi.values(None),
        lambda: winapi.subkeys(None),
    ):
        with pytest.raises(NotImplementedError):
            call()

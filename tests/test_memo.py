"""The verdict memo: a hooked process whose environment is unchanged since a clean analysis
is answered without importing the analysis; any change, damage or doubt analyses in full.

Each case runs the start-up watcher's guard in fresh child processes (live Linux analysis of
a built torch site on ``PYTHONPATH``), as ``import torch`` would under the hook.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from fs_spy import spied
from test_linux_import import nvjitlink, torch_site
from test_records import age

from torchguard._binary import memo, state

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the memo answers live Linux analyses"
)

#: The guard as the watcher runs it inside ``import torch``; what happened, as JSON: its
#: outcome, whether the memo answered, whether any module of the analysis was imported.
GUARD = """
import sys
{before}
from torchguard._boot import TorchImportWatcher
try:
    TorchImportWatcher().guard()
    outcome = "proceeds"
except ImportError as exc:
    outcome = type(exc).__name__
memo = sys.modules.get("torchguard._binary.memo")
{after}
analysis = ("torchguard._frontends", "torchguard._platforms", "torchguard._rules",
            "torchguard._report", "torchguard._hook", "torchguard._binary.cache")
import json
print(json.dumps([outcome, bool(memo and memo.passed), any(m.startswith(analysis) for m in sys.modules)]))
"""

ANALYSED = ["proceeds", False, True]
ANSWERED = ["proceeds", True, False]


def guard(
    tmp_path: Path, site: Path, *, before: str = "", after: str = "", **env: str
) -> list[object]:
    environ = {  # pytest names the test phase in PYTEST_CURRENT_TEST: part of the environment
        k: v for k, v in os.environ.items() if not k.startswith(("TORCHGUARD", "PYTEST"))
    }
    environ.pop("LD_LIBRARY_PATH", None)
    environ.update(PYTHONPATH=str(site), TORCHGUARD_CACHE_DIR=str(tmp_path / "cache"), **env)
    done = subprocess.run(
        [sys.executable, "-c", GUARD.format(before=before, after=after)],
        env=environ,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=tmp_path / "work",
    )
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def memo_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / memo.FOLDER).glob("*.memo"))


def age_interpreter_paths() -> None:
    """Date this interpreter's site folders and ``sys.path`` folders back when they changed
    lately.

    The child runs ``sys.executable``, so they are watched states: within :data:`memo.RACY`
    seconds of ``pip install -e`` (the site folder) or of a file created in the checkout (an
    editable install's path entry) they are too young to memoize and no memo is written. Only
    each folder's own time changes (nothing below it), and only when younger than a minute."""
    folders = {Path(sysconfig.get_path(name)) for name in ("purelib", "platlib")}
    folders |= {Path(entry) for entry in sys.path if entry}
    for folder in folders:
        if folder.is_dir() and time.time() - folder.stat().st_mtime < 60:
            age(folder, below=False)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A healthy torch site installed long ago, and a clean analysis of it memoized."""
    (tmp_path / "work").mkdir()
    found = torch_site(tmp_path)
    age(found, tmp_path / "work")
    age_interpreter_paths()
    assert guard(tmp_path, found) == ANALYSED
    assert len(memo_files(tmp_path)) == 1
    return found


def test_an_unchanged_environment_is_answered_without_importing_the_analysis(
    tmp_path: Path, site: Path
) -> None:
    assert guard(tmp_path, site) == ANSWERED
    assert guard(tmp_path, site) == ANSWERED


def test_a_changed_library_is_analysed_and_its_failure_raised(tmp_path: Path, site: Path) -> None:
    nvjitlink(site / "nvidia" / "nvjitlink" / "lib", 4)  # rewritten in place: its own state
    assert guard(tmp_path, site) == ["MissingSymbolError", False, True]
    assert guard(tmp_path, site) == ["MissingSymbolError", False, True]


def test_a_failing_analysis_leaves_no_memo(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    site = torch_site(tmp_path)
    nvjitlink(site / "nvidia" / "nvjitlink" / "lib", 4)
    age(site, tmp_path / "work")
    assert guard(tmp_path, site)[0] == "MissingSymbolError"
    assert memo_files(tmp_path) == []


def test_a_just_changed_environment_leaves_no_memo(tmp_path: Path) -> None:
    """A state younger than RACY seconds may still be changing: it is not memoized."""
    (tmp_path / "work").mkdir()
    site = torch_site(tmp_path)  # written just now
    assert guard(tmp_path, site) == ANALYSED
    assert memo_files(tmp_path) == []


def _install(site: Path) -> None:
    (site / "newpkg-1.0.dist-info").mkdir()
    (site / "newpkg-1.0.dist-info" / "METADATA").write_text("Name: newpkg\nVersion: 1.0\n")


def _remove_from_torch_lib(site: Path) -> None:
    (site / "torch" / "lib" / "libtorch_global_deps.so").unlink()


def _add_to_nvidia(site: Path) -> None:
    (site / "nvidia" / "cusparse" / "lib" / "libextra.so.1").write_bytes(b"")


@pytest.mark.parametrize(
    "change", [_install, _remove_from_torch_lib, _add_to_nvidia], ids=lambda f: f.__name__
)
def test_a_change_on_disk_is_analysed(tmp_path: Path, site: Path, change: object) -> None:
    change(site)  # type: ignore[operator]
    assert guard(tmp_path, site) == ANALYSED


@pytest.mark.parametrize(
    "variable", ["LD_LIBRARY_PATH", "LD_PRELOAD", "CUDA_VISIBLE_DEVICES", "SOMETHING_ELSE"]
)
def test_a_changed_environment_variable_is_analysed(
    tmp_path: Path, site: Path, variable: str
) -> None:
    assert guard(tmp_path, site, **{variable: str(tmp_path)}) == ANALYSED


def test_a_library_loaded_before_torch_is_analysed(tmp_path: Path, site: Path) -> None:
    loaded = "import ctypes, ctypes.util\nctypes.CDLL(ctypes.util.find_library('m'))"
    assert guard(tmp_path, site, before=loaded) == ANALYSED


def test_another_torchguard_version_is_analysed(tmp_path: Path, site: Path) -> None:
    other = "import torchguard._version as v\nv.__version__ = v.__version__ + '.other'"
    assert guard(tmp_path, site, before=other) == ANALYSED


def test_another_sys_path_is_analysed(tmp_path: Path, site: Path) -> None:
    assert guard(tmp_path, site, before="sys.path.append('/nonexistent')") == ANALYSED


def test_the_hook_off_or_a_report_requested_analyses(tmp_path: Path, site: Path) -> None:
    report = tmp_path / "report.json"
    assert guard(tmp_path, site, TORCHGUARD_REPORT=str(report)) == ANALYSED
    assert json.loads(report.read_text())["import_torch"]["ok"]
    assert guard(tmp_path, site, TORCHGUARD="off")[:2] == ["proceeds", False]  # the hook's own


def _truncate(text: bytes) -> bytes:
    return text[: len(text) // 2]


def _drop_last_line(text: bytes) -> bytes:
    return text[: text.rstrip(b"\n").rfind(b"\n") + 1]


def _garbage(text: bytes) -> bytes:
    return bytes((b * 7 + 3) % 256 for b in text)


def _foreign(text: bytes) -> bytes:
    return text.replace(b"python ", b"python 2.7 ", 1)


def _forged_state(text: bytes) -> bytes:
    lines = text.split(b"\n")
    index = next(i for i, line in enumerate(lines) if line.startswith(b"state "))
    lines[index] = b"state 1:2:3:4:5:6 " + lines[index].split(b" ", 2)[2]
    return b"\n".join(lines)


def _empty(text: bytes) -> bytes:
    return b""


def _huge(text: bytes) -> bytes:
    return text + b"x" * (memo.MAX_BYTES + 1)


@pytest.mark.parametrize(
    "damage",
    [_truncate, _drop_last_line, _garbage, _foreign, _forged_state, _empty, _huge],
    ids=lambda f: f.__name__,
)
def test_a_damaged_or_foreign_memo_is_never_trusted(
    tmp_path: Path, site: Path, damage: object
) -> None:
    (path,) = memo_files(tmp_path)
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    assert guard(tmp_path, site) == ANALYSED
    assert guard(tmp_path, site) == ANSWERED  # the analysis wrote a good one again


def test_an_unreadable_memo_folder_analyses(tmp_path: Path, site: Path) -> None:
    (path,) = memo_files(tmp_path)
    path.unlink()
    path.mkdir()  # a folder where the memo should be: read and write both fail
    assert guard(tmp_path, site) == ANALYSED


def test_ensure_after_a_memo_answer_analyses_instead_of_saying_too_late(
    tmp_path: Path, site: Path
) -> None:
    """The hook's analysis used to leave ensure() its report; after a memo answer there is
    none, so ensure() (torch now imported) analyses rather than warn that it came too late."""
    after = (
        "import torch, torchguard\n"  # the built torch's __init__ only defines a function
        "report = torchguard.ensure()\n"
        "assert [f.code for f in report.findings] == [], report.findings\n"
    )
    assert guard(tmp_path, site, after=after) == ["proceeds", True, True]


def test_check_never_raises_and_save_needs_a_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memo, "pending", None)
    assert memo.save(["/"]) is False  # no check missed first: nothing to save
    monkeypatch.setattr(memo, "base", lambda mapped: 1 / 0)
    assert memo.check() is False


@pytest.mark.parametrize(
    ("mapped_meanwhile", "kept"),
    [
        ("/usr/lib/x86_64-linux-gnu/libz.so.1", True),  # a search finds it there too
        ("/opt/py/lib/python3.11/lib-dynload/zlib.cpython-311-x86_64-linux-gnu.so", True),
        ("/opt/conda/lib/libz.so.1", False),  # found through the extension's own RPATH
    ],
)
def test_a_library_the_analysis_mapped_outside_the_system_folders_leaves_no_memo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mapped_meanwhile: str, kept: bool
) -> None:
    """A memo answer runs ``import torch`` without what the analysis's own imports mapped."""
    before = ["/usr/lib/x86_64-linux-gnu/libc.so.6"]
    target = tmp_path / memo.FOLDER / "env.memo"
    pending = (str(target), ["line"], memo._now(), frozenset(before))
    monkeypatch.setattr(memo, "pending", pending)
    monkeypatch.setattr(memo, "_mapped", lambda: [*before, mapped_meanwhile])
    monkeypatch.setattr(memo, "fixed_paths", list)
    assert memo.save([]) is kept
    assert target.exists() is kept


def test_watching_collects_paths_only_while_on() -> None:
    state.watch("/before")
    with state.watching() as seen:
        state.host_state("/nonexistent/a")
        state.watch("/b")
    state.watch("/after")
    assert seen == {"/nonexistent/a", "/b"}


#: A warm analysis under a spy of every file-system call: the paths it touched that the memo
#: it leaves does not watch (its own cache, /proc, Python's and torchguard's own files, a
#: path ``realpath`` walks with ``lstat``, an absent name below a watched folder aside).
SPY = (
    """
import builtins, json, os, sys
import pathlib  # before the spies: Python 3.9's pathlib makes os.stat a method of its class
from torchguard._binary import memo
from torchguard._frontends import api
os.unlink(memo.memo_file())
assert not memo.check()
"""
    + spied("api._memoized_linux_report()")
    + """
assert not report.blocking
with open(memo.memo_file(), encoding="utf-8") as handle:
    watched = {line.split(" ", 2)[2] for line in handle if line.startswith("state ")}
watched = {path.rstrip("\\n") for path in watched}
watched |= {os.path.abspath(path) for path in watched}
own = (os.environ["TORCHGUARD_CACHE_DIR"], "/proc/", sys.base_prefix, sys.prefix,
       os.path.dirname(os.path.dirname(memo.__file__)))
def present(path):
    while not os.path.lexists(path):  # an absent name shows in its nearest folder's state
        path = os.path.dirname(path)
    return path
print(json.dumps(sorted(
    path for path, calls in touched.items()
    if path not in watched and present(path) not in watched
    and not path.startswith(own) and calls != {"lstat"}
)))
"""
)


def test_the_memo_watches_every_path_a_warm_analysis_touches(tmp_path: Path, site: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHGUARD", "PYTEST"))}
    environ.update(PYTHONPATH=str(site), TORCHGUARD_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(
        [sys.executable, "-c", SPY],
        env=environ,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=tmp_path / "work",
    )
    unwatched = json.loads(done.stdout.splitlines()[-1])
    assert unwatched == [], "\n".join(unwatched)

"""Folders a program registered with ``os.add_dll_directory`` before ``ensure()``: the ones
torchguard saw are searched like any registered folder; one it could not see, holding the DLL
it finds nowhere else, makes ``missing-dll`` a warning that says what it assumed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import TORCH_241_GRAPH, FakeTorch
from pe_builder import build_pe

from torchguard._boot import observe_dll_directories
from torchguard._frontends.pipeline import analyze
from torchguard._hook import watcher_source
from torchguard._platforms.windows.system import offline_windows
from torchguard._platforms.windows.user_dirs import maybe_registered, registered
from torchguard._report.findings import ERROR, WARNING


class Handle:
    """What CPython's ``os.add_dll_directory`` returns: ``path``, None once closed."""

    def __init__(self, path: str) -> None:
        self.path: str | None = path

    def close(self) -> None:
        self.path = None


def fake_add(path: str) -> Handle:
    if not path.startswith("C:\\"):
        raise FileNotFoundError(2, "The system cannot find the file specified", path)
    return Handle(path)


def test_the_observer_keeps_open_registrations_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "add_dll_directory", fake_add, raising=False)
    assert registered() == ()  # not observed yet: nothing known
    observe_dll_directories()
    observe_dll_directories()  # wrapped once
    add = os.add_dll_directory  # type: ignore[attr-defined]
    assert add.__wrapped__ is fake_add
    first = add("C:\\app\\numpy.libs")
    second = add("C:\\cudnn\\bin")
    assert isinstance(first, Handle) and first.path == "C:\\app\\numpy.libs"
    with pytest.raises(FileNotFoundError):  # the same error, unchanged
        add("relative")
    assert registered() == ("C:\\app\\numpy.libs", "C:\\cudnn\\bin")
    second.close()
    assert registered() == ("C:\\app\\numpy.libs",)


def test_the_start_up_hook_observes_from_interpreter_start(tmp_path: Path) -> None:
    """The start-up module (the watcher's source) wraps it before any package runs."""
    code = (
        "import os\n"
        "os.add_dll_directory = lambda path: path\n"
        f"exec({watcher_source()!r}, {{'__name__': '_torchguard_hook'}})\n"
        "print(os.add_dll_directory('C:\\\\x'), type(os.add_dll_directory.torchguard_handles).__name__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TORCHGUARD"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["C:\\x", "list"]


def test_folders_that_may_be_registered() -> None:
    loaded = [
        "C:\\Windows\\System32\\kernel32.dll",
        "C:\\Python\\python311.dll",
        "C:\\env\\Lib\\site-packages\\numpy.libs\\libopenblas-abc.dll",
        "C:\\env\\Lib\\site-packages\\onnxruntime\\capi\\onnxruntime.dll",
        "C:\\cudnn\\bin\\cudnn64_9.dll",
    ]
    found = maybe_registered(
        loaded,
        ["C:\\env\\Lib\\site-packages\\scipy.libs"],
        known=["C:\\CUDNN\\bin"],
        ordinary=["C:\\Windows\\System32", "C:\\Python"],
    )
    assert found == (
        "C:\\env\\Lib\\site-packages\\numpy.libs",
        "C:\\env\\Lib\\site-packages\\onnxruntime\\capi",
        "C:\\env\\Lib\\site-packages\\scipy.libs",
    )


EXTRA = "C:\\cudnn\\bin"


def _system(tmp_path: Path, runtime_dir: Path) -> object:
    graph = dict(TORCH_241_GRAPH)
    graph["c10.dll"] = (*graph["c10.dll"], "cudnn64_9.dll")
    site = FakeTorch(graph=graph).write(tmp_path / "site")
    folder = tmp_path / "cudnn"
    folder.mkdir()
    (folder / "cudnn64_9.dll").write_bytes(build_pe(["KERNEL32.dll"]))
    system = offline_windows([str(site)], system32_dirs=[str(runtime_dir)])
    system.tree.mount_host_dir(EXTRA, str(folder))
    return system


@pytest.mark.parametrize("seen", ["nowhere", "registered", "maybe registered"])
def test_a_dll_in_a_folder_the_program_registered(
    tmp_path: Path, runtime_dir: Path, seen: str
) -> None:
    system = _system(tmp_path, runtime_dir)
    if seen == "registered":
        system.registered_dirs = (EXTRA,)  # type: ignore[attr-defined]
    elif seen == "maybe registered":
        system.unseen_dirs = (EXTRA,)  # type: ignore[attr-defined]
    report = analyze(system)  # type: ignore[arg-type]
    about = [f for f in report.findings if f.missing == "cudnn64_9.dll"]
    if seen == "nowhere":  # in no folder the program could have registered: a proof
        assert [f.severity for f in about] == [ERROR] and report.blocking
    elif seen == "registered":  # searched as Windows searches it: found
        assert about == [] and report.import_torch is not None and report.import_torch.ok
    else:
        assert [f.severity for f in about] == [WARNING] and not report.blocking
        assert "Not certain" in about[0].message and EXTRA in about[0].message
        assert "os.add_dll_directory" in about[0].message

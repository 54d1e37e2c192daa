"""A process that renamed itself (``setproctitle``: Ray, gunicorn, celery, uWSGI) overwrote the
memory ``/proc/self/environ`` shows. ld.so read ``LD_LIBRARY_PATH`` before that and kept it:
torchguard asks ld.so (``dlinfo``), and where it cannot, a failure ``LD_LIBRARY_PATH`` could
undo is a warning, never a proof. glibc's real ``dlopen`` is the judge, in child processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from linux_elf import write_so

from torchguard._platforms.linux.files import PosixFiles
from torchguard._platforms.linux.hwcaps import glibc_version
from torchguard._platforms.linux.ldso import Ldso
from torchguard._platforms.linux.locate import environment
from torchguard._platforms.linux.process import intact
from torchguard._platforms.linux.searchlist import library_path_of
from torchguard._platforms.linux.system import offline_linux

GCC = shutil.which("gcc")
LINUX = sys.platform.startswith("linux") and glibc_version() is not None
live = pytest.mark.skipif(not LINUX, reason="a live glibc process is the subject")

try:
    import setproctitle  # noqa: F401

    HOW = ["setproctitle", "ctypes"]
except ImportError:  # the test extra installs it on Linux; the ctypes way needs nothing
    HOW = ["ctypes"]

CLOBBER = """
import ctypes, os

def clobber(how):
    '''Overwrite the start-up environment's memory as a renamed process does.'''
    if how == "setproctitle":
        import setproctitle
        setproctitle.setproctitle("worker")
    else:  # setproctitle's own way: NULs over the environment block the kernel shows
        fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50, 51)
        ctypes.memset(start, 0, end - start)
    assert b"LD_LIBRARY_PATH" not in open("/proc/self/environ", "rb").read()
"""


def child(code: str, env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CLOBBER + code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def base_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    env["TORCHGUARD_CACHE_DIR"] = str(tmp_path / "cache")
    env.update(extra)
    return env


# -- what /proc/self/environ shows ---------------------------------------------------------


def test_an_environment_the_kernel_laid_out_is_intact() -> None:
    assert intact(b"LD_LIBRARY_PATH=/opt/lib\0HOME=/root\0")
    assert intact(b"")  # env -i
    assert intact(b"EMPTY=\0A==b\0")


@pytest.mark.parametrize(
    "raw",
    [
        b"\0" * 200,  # setproctitle: the title fits in argv, the environment is padded away
        b"celery worker --loglevel=info\0\0\0\0\0",  # a long title, then the padding
        b"gunicorn: worker [app]\0HOME=/root\0",  # a title over the first entries
        b"LD_LIBRARY_PATH=/opt/lib\0HOME=/ro",  # cut short
        b"=value\0",
    ],
)
def test_a_title_or_padding_is_no_environment(raw: bytes) -> None:
    assert not intact(raw)


@live
@pytest.mark.parametrize("how", HOW)
def test_a_renamed_process_environ_is_not_read_as_empty(tmp_path: Path, how: str) -> None:
    """Before: the padding parsed as an environment with no LD_LIBRARY_PATH at all."""
    code = (
        "from torchguard._platforms.linux.process import read_environ\n"
        "before = read_environ() is not None\n"
        f"clobber({how!r})\n"
        "import json; print(json.dumps([before, read_environ()]))\n"
    )
    assert child(code, base_env(tmp_path, LD_LIBRARY_PATH="/opt/x")) == [True, None]


# -- ld.so's own search list ------------------------------------------------------------------


def test_library_path_is_cut_from_lds_search_list() -> None:
    system = ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"]
    assert library_path_of(system, ()) == ()
    assert library_path_of(["/opt/a", ".", *system], ()) == ("/opt/a", ".")
    # a system folder LD_LIBRARY_PATH names too stays in it: the defaults are listed again
    both = ["/opt/a", "/usr/lib/x86_64-linux-gnu", *system]
    assert library_path_of(both, ()) == ("/opt/a", "/usr/lib/x86_64-linux-gnu")
    # the interpreter's DT_RPATH comes first (conda's python), once per folder
    rpath = ("/env/bin/../lib", "/env/bin/../lib")
    assert library_path_of(["/env/bin/../lib", "/opt/a", "/lib64", "/usr/lib64"], rpath) == (
        "/opt/a",
    )


@live
@pytest.mark.parametrize("how", HOW)
def test_lds_search_list_survives_the_rename(tmp_path: Path, how: str) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    code = (
        f"clobber({how!r})\n"
        "import sys, os\n"
        "from torchguard._platforms.linux.system import live_linux\n"
        "system = live_linux(None)\n"
        "import json; print(json.dumps([list(system.ld_library_path), system.library_path_doubt]))\n"
    )
    value = f"{lib}:/opt/nowhere"
    assert child(code, base_env(tmp_path, LD_LIBRARY_PATH=value)) == [
        [str(lib), "/opt/nowhere"],
        "",
    ]


# -- glibc judges: the real dlopen against torchguard's model ---------------------------------

JUDGE = """
import json, os
from torchguard._platforms.linux.files import PosixFiles
from torchguard._platforms.linux.system import live_linux
import torchguard._platforms.linux.system as system_module
from torchguard._platforms.linux.ldso import Ldso
from torchguard._platforms.linux.locate import environment

clobber({how!r})
if {blind!r}:  # ld.so cannot be asked, and the program changed its os.environ since
    system_module.startup_library_path = lambda executable: None
    del os.environ["LD_LIBRARY_PATH"]
system = live_linux(None)
ldso = Ldso(PosixFiles(), environment(system))
ldso.start(system.executable, system.mapped, live=True)
result = ldso.dlopen({target!r})
error = result.error
try:
    import ctypes; ctypes.CDLL({target!r}); real = True
except OSError:
    real = False
print(json.dumps({{"real": real, "model": result.ok, "doubt": error.doubt if error else ""}}))
"""


@live
@pytest.mark.skipif(GCC is None, reason="gcc builds the library")
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("blind", [False, True], ids=["ldso-asked", "ldso-not-asked"])
def test_a_library_found_through_ld_library_path_is_never_a_proof_of_absence(
    tmp_path: Path, how: str, blind: bool
) -> None:
    folder = tmp_path / "ldpath"
    folder.mkdir()
    source = folder / "renamed.c"
    source.write_text("int renamed_f(void) { return 1; }\n")
    target = folder / "librenamed.so.1"
    subprocess.run(
        [
            GCC or "gcc",
            "-shared",
            "-fPIC",
            "-o",
            str(target),
            str(source),
            "-Wl,-soname,librenamed.so.1",
        ],
        check=True,
        timeout=120,
    )
    code = JUDGE.format(how=how, blind=blind, target="librenamed.so.1")
    seen = child(code, base_env(tmp_path, LD_LIBRARY_PATH=str(folder)))
    assert seen["real"] is True  # glibc: found through LD_LIBRARY_PATH as read at start
    if not blind:
        assert seen == {"real": True, "model": True, "doubt": ""}
    else:  # nothing left to see it by: a warning that says why, never a proof
        assert seen["model"] is False
        assert "setproctitle" in str(seen["doubt"]) and "LD_LIBRARY_PATH" in str(seen["doubt"])


# -- ensure() in a renamed process --------------------------------------------------------------


def _torch_needing(site: Path, soname: str) -> None:
    """A torch whose ``_C`` needs ``soname``, found nowhere but on ``LD_LIBRARY_PATH``."""
    write_so(site / "torch", "_C.cpython-311-x86_64-linux-gnu.so", needed=[soname])
    (site / "torch" / "__init__.py").write_text("")
    (site / "torch" / "version.py").write_text("__version__ = '2.9.1+cpu'\ncuda = None\n")


ENSURE = """
import json, os, torchguard
import torchguard._platforms.linux.system as system_module
clobber({how!r})
if {blind!r}:
    system_module.startup_library_path = lambda executable: None
    del os.environ["LD_LIBRARY_PATH"]
try:
    report = torchguard.ensure()
    print(json.dumps({{"raised": None, "warnings": [f.message for f in report.warnings]}}))
except torchguard.TorchDllError as exc:
    print(json.dumps({{"raised": type(exc).__name__}}))
"""


@live
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("blind", [False, True], ids=["ldso-asked", "ldso-not-asked"])
def test_ensure_in_a_renamed_process_raises_nothing_ldso_would_load(
    tmp_path: Path, how: str, blind: bool
) -> None:
    site, folder = tmp_path / "site", tmp_path / "ldpath"
    _torch_needing(site, "libworker.so.1")
    write_so(folder, "libworker.so.1")
    env = base_env(tmp_path, PYTHONPATH=str(site), LD_LIBRARY_PATH=str(folder))
    seen = child(ENSURE.format(how=how, blind=blind), env)
    assert seen["raised"] is None, seen
    warnings = [str(w) for w in seen["warnings"]]  # type: ignore[attr-defined]
    if blind:
        assert any("libworker.so.1" in w and "Not certain" in w for w in warnings), warnings
    else:
        assert not any("libworker.so.1" in w for w in warnings), warnings


def test_only_what_ld_library_path_could_undo_becomes_doubt(
    tmp_path: Path,
) -> None:
    """A name searched for could come from LD_LIBRARY_PATH; a file opened by path could not."""
    site = tmp_path / "site"
    lib = site / "torch" / "lib"
    write_so(lib, "libtorch_cpu.so", needed=["libgone.so.1"], rpath="$ORIGIN")
    write_so(lib, "libc10.so")
    write_so(
        site / "torch",
        "_C.cpython-311-x86_64-linux-gnu.so",
        needed=["libtorch_cpu.so"],
        rpath="$ORIGIN/lib",
    )
    system = offline_linux([str(site)])
    doubtful = replace(system, library_path_doubt="unknown")
    for subject in (system, doubtful):
        ldso = Ldso(PosixFiles(), environment(subject))
        ldso.start(None)
        missing = ldso.dlopen(str(site / "torch" / "_C.cpython-311-x86_64-linux-gnu.so"))
        assert missing.error is not None and missing.error.missing == "libgone.so.1"
        assert missing.error.doubt == ("unknown" if subject is doubtful else "")
        corrupt_path = lib / "libbroken.so"
        corrupt_path.write_bytes(b"\x7fELF" + b"\0" * 10)
        by_path = ldso.dlopen(str(corrupt_path))
        assert by_path.error is not None and not by_path.error.doubt

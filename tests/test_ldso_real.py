"""The ld.so model against glibc's real loader, on tiny libraries gcc builds in ``tmp_path``.

Each scenario builds a few shared objects (sonames, RPATH/RUNPATH with dynamic string tokens,
version scripts), damages or preloads some, and compares what the model predicts for a
``dlopen`` with what ``python -c "import ctypes; ctypes.CDLL(...)"`` really does in a child
process with the same environment. No torch needed; gcc is (it is on CI machines).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from torchguard._platforms.linux.files import PosixFiles
from torchguard._platforms.linux.hwcaps import glibc_version
from torchguard._platforms.linux.ldso import CORRUPT, SYMBOL, VERSION, DlopenResult, Ldso
from torchguard._platforms.linux.locate import environment
from torchguard._platforms.linux.maps import read_maps
from torchguard._platforms.linux.system import LinuxSystem, live_linux

GCC = shutil.which("gcc")

pytestmark = [
    pytest.mark.realwheel,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the judge is glibc's ld.so"),
    pytest.mark.skipif(GCC is None, reason="gcc builds the libraries"),
    pytest.mark.skipif(glibc_version() is None, reason="the judge is glibc's ld.so"),
]

PYTHON = os.path.realpath(sys.executable)


def build(
    folder: Path,
    name: str,
    source: str,
    *,
    soname: str | None = None,
    needed: Sequence[Path] = (),
    rpath: str | None = None,
    runpath: str | None = None,
    versions: str | None = None,
) -> Path:
    """``gcc -shared -fPIC`` of ``source`` into ``folder/name``."""
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / f"{name}.c"
    src.write_text(source)
    out = folder / name
    cmd = [GCC or "gcc", "-shared", "-fPIC", "-o", str(out), str(src)]
    cmd += [f"-Wl,-soname,{soname or name}"]
    for lib in needed:
        cmd += [str(lib)]
    if rpath is not None:
        cmd += [f"-Wl,-rpath,{rpath}", "-Wl,--disable-new-dtags"]
    if runpath is not None:
        cmd += [f"-Wl,-rpath,{runpath}", "-Wl,--enable-new-dtags"]
    if versions is not None:
        script = folder / f"{name}.map"
        script.write_text(versions)
        cmd += [f"-Wl,--version-script={script}"]
    subprocess.run(cmd, check=True, timeout=120, capture_output=True)
    return out


def real(target: Path, env: Mapping[str, str] = (), code: str | None = None) -> tuple[bool, str]:
    """The real ``ctypes.CDLL(target)``: (loaded, the error text, a signal or ld.so's stderr)."""
    child = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    child.update(dict(env))
    done = subprocess.run(
        [PYTHON, "-c", code or f"import ctypes; ctypes.CDLL({str(target)!r})"],
        env=child,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode < 0:
        return False, f"signal {signal.Signals(-done.returncode).name}"
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    error = next((line for line in reversed(lines) if line.startswith("OSError: ")), "")
    if done.returncode != 0:
        return False, error.split(": ", 1)[1] if error else done.stderr
    return True, "\n".join(line for line in lines if line.startswith("ERROR: ld.so"))


def model(env: Mapping[str, str] = ()) -> Ldso:
    """The model of a fresh ``python`` process started with ``env``: this machine's cache,
    default directories, CPU and glibc, the interpreter loaded, then the preloads."""
    here = live_linux(None)
    values = dict(env)
    system = LinuxSystem(
        site_dirs=(),
        torch_package_dir=None,
        ld_library_path=tuple(filter(None, values.get("LD_LIBRARY_PATH", "").split(":"))),
        cache=here.cache,
        default_dirs=here.default_dirs,
        machine=here.machine,
        executable=PYTHON,
        preload=tuple(values.get("LD_PRELOAD", "").replace(":", " ").split()),
        preload_file=here.preload_file,
        dst_lib=here.dst_lib,
        cpu=here.cpu,
        glibc=here.glibc,
    )
    ldso = Ldso(PosixFiles(), environment(system))
    ldso.start(PYTHON, ())
    return ldso


def agree(result: DlopenResult, truth: tuple[bool, str]) -> None:
    ok, text = truth
    assert result.ok == ok, (result.error, text)
    if not ok:
        assert result.error is not None and not result.error.doubt
        if text.startswith("signal"):
            assert result.error.kind == CORRUPT and "SIGBUS" in result.error.message()
        else:
            assert result.error.message() in text, (result.error.message(), text)


DEP = "int dep_f(void) { return 1; }\n"
NO_DEP = "int other_f(void) { return 2; }\n"
USER = "int dep_f(void);\nint user_f(void) { return dep_f(); }\n"


# -- damaged files: only glibc's own checks prove a failure -----------------------------------


def _damaged(tmp_path: Path, how: str) -> Path:
    good = build(tmp_path / "src", "libdep.so", DEP)
    data = bytearray(good.read_bytes())
    if how == "phdrs cut":
        data = data[:100]
    elif how == "segments cut":
        data = data[:8000]
    elif how == "section headers cut":
        data = data[: len(data) - 200]
    elif how == "header cut":
        data = data[:40]
    elif how == "ident padding":
        data[12] = 1
    elif how == "osabi":
        data[7] = 9
    elif how == "e_type":
        data[16] = 1
    elif how == "no magic":
        data[0] = 0
    elif how == "32-bit class byte":
        data[4] = 1
    elif how == "section table garbage":
        data[40:48] = (len(data) * 4).to_bytes(8, "little")  # e_shoff past the end
    target = tmp_path / "lib" / "libdep.so"
    target.parent.mkdir()
    target.write_bytes(bytes(data))
    return build(tmp_path, "libuser.so", USER, needed=[good], rpath="$ORIGIN/lib")


@pytest.mark.parametrize(
    "how",
    [
        "phdrs cut",
        "segments cut",
        "section headers cut",
        "header cut",
        "ident padding",
        "osabi",
        "e_type",
        "no magic",
        "section table garbage",
        "32-bit class byte",
    ],
)
def test_a_damaged_dependency_fails_exactly_when_glibc_refuses_it(tmp_path: Path, how: str) -> None:
    user = _damaged(tmp_path, how)
    agree(model().dlopen(str(user)), real(user))


def test_a_file_only_torchguards_reader_refuses_is_a_warning_never_a_proof(tmp_path: Path) -> None:
    """A dependency with a 77,000-character RUNPATH: torchguard's reader refuses strings that
    long, glibc loads the file. The model carries it unread and cannot prove anything."""
    runpath = ":".join(f"/nonexistent/dir{i:05d}" for i in range(3500))
    good = build(tmp_path / "src", "libdep.so", DEP)
    build(tmp_path / "lib", "libdep.so", DEP, runpath=runpath)
    user = build(tmp_path, "libuser.so", USER, needed=[good], rpath="$ORIGIN/lib")
    assert real(user) == (True, "")
    result = model().dlopen(str(user))
    assert result.error is not None and result.error.doubt, result.error
    assert "libdep.so could not be read" in result.error.doubt
    assert "reader refuses it" in result.error.doubt


# -- LD_PRELOAD ---------------------------------------------------------------------------------


def test_a_preloaded_library_serves_symbols_to_later_loads(tmp_path: Path) -> None:
    provider = build(tmp_path / "pre", "libprovider.so", DEP)
    user = build(tmp_path, "libuser.so", USER)  # no NEEDED: only the global scope has dep_f
    env = {"LD_PRELOAD": str(provider)}
    agree(model(env).dlopen(str(user)), real(user, env))
    agree(model().dlopen(str(user)), real(user))  # without the preload it fails


def test_preload_entries_that_cannot_load_are_reported_and_skipped(tmp_path: Path) -> None:
    provider = build(tmp_path / "pre", "libprovider.so", DEP)
    user = build(tmp_path, "libuser.so", USER)
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"\x7fELF\x02\x01\x01")
    env = {"LD_PRELOAD": f"/nonexistent/libx.so {broken}:{provider}  libnamed.so"}
    ok, printed = real(user, env)
    ldso = model(env)
    agree(ldso.dlopen(str(user)), (ok, printed))
    assert [p.message() for p in ldso.ignored_preloads] == printed.splitlines()


def test_an_old_library_preloaded_first_wins_by_soname_and_fails_the_version(
    tmp_path: Path,
) -> None:
    """The shape of an old libstdc++ in LD_PRELOAD: ``version `GLIBCXX_3.4.30' not found``."""
    versions_new = "V_1 { global: old_f; };\nV_2 { global: new_f; } V_1;\n"
    new = build(
        tmp_path / "new",
        "libv.so.1",
        "int old_f(void){return 1;}\nint new_f(void){return 2;}\n",
        versions=versions_new,
    )
    old = build(
        tmp_path / "old", "libv.so.1", "int old_f(void){return 1;}\n", versions="V_1 { *; };\n"
    )
    user = build(
        tmp_path,
        "libuser.so",
        "int new_f(void);\nint user_f(void){return new_f();}\n",
        needed=[new],
        rpath=str(tmp_path / "new"),
    )
    env = {"LD_PRELOAD": str(old)}
    result = model(env).dlopen(str(user))
    agree(result, real(user, env))
    assert result.error is not None and result.error.kind == VERSION
    agree(model().dlopen(str(user)), real(user))


def test_a_preloaded_definition_interposes(tmp_path: Path) -> None:
    """A preload defining the symbol satisfies a library whose own dependency lacks it."""
    lacking = build(tmp_path / "lib", "libdep.so", NO_DEP)
    user = build(tmp_path, "libuser.so", USER, needed=[lacking], rpath="$ORIGIN/lib")
    provider = build(tmp_path / "pre", "libprovider.so", DEP)
    env = {"LD_PRELOAD": str(provider)}
    agree(model(env).dlopen(str(user)), real(user, env))
    result = model().dlopen(str(user))
    agree(result, real(user))
    assert result.error is not None and result.error.kind == SYMBOL


# -- dynamic string tokens ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "search",
    [
        "$ORIGIN/$LIB",
        "$ORIGIN/${LIB}",
        "$ORIGIN/$PLATFORM",
        "${ORIGIN}/${PLATFORM}",
        "$ORIGIN/$FOO",
    ],
)
def test_dynamic_string_tokens_expand_as_glibc_expands_them(tmp_path: Path, search: str) -> None:
    """The good copy sits where glibc's expansion points, a copy without ``dep_f`` in every
    other spelling's folder: only the right expansion binds."""
    ldso = model()
    lib, platform = ldso.env.lib, ldso.cpu().platform
    for folder in {lib, platform, "$FOO", "lib64", "lib", "x86_64", "haswell"}:
        right = folder == {"LIB": lib, "PLATFORM": platform}.get(
            search.rsplit("/", 1)[-1].strip("${}"), "$FOO"
        )
        build(tmp_path / folder, "libdep.so", DEP if right else NO_DEP)
    good = tmp_path / "src"
    linked = build(good, "libdep.so", DEP)
    user = build(tmp_path, "libuser.so", USER, needed=[linked], runpath=search)
    agree(ldso.dlopen(str(user)), real(user))
    assert ldso.loaded("libdep.so") is not None


def test_a_token_glued_to_more_letters_is_not_expanded(tmp_path: Path) -> None:
    build(tmp_path / "$ORIGINAL", "libdep.so", DEP)
    linked = build(tmp_path / "src", "libdep.so", DEP)
    user = build(tmp_path, "libuser.so", USER, needed=[linked], runpath="$ORIGINAL")
    # a relative directory: both the child and the model run from tmp_path
    code = f"import os, ctypes; os.chdir({str(tmp_path)!r}); ctypes.CDLL({str(user)!r})"
    truth = real(user, code=code)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        agree(model().dlopen(str(user)), truth)
    finally:
        os.chdir(cwd)


# -- hwcaps subdirectories ----------------------------------------------------------------------


@pytest.mark.parametrize("subdir", ["glibc-hwcaps/x86-64-v2", "tls", "x86_64"])
def test_hwcaps_subdirectories_are_tried_before_their_directory(
    tmp_path: Path, subdir: str
) -> None:
    """A copy without ``dep_f`` in a subdirectory the CPU (and this glibc) supports wins over
    the good one beside it: glibc-hwcaps since 2.33, ``tls``/platform until 2.37."""
    if os.uname().machine != "x86_64":
        pytest.skip("x86-64 levels")
    build(tmp_path / "lib", "libdep.so", DEP)
    build(tmp_path / "lib" / subdir, "libdep.so", NO_DEP)
    linked = build(tmp_path / "src", "libdep.so", DEP)
    user = build(tmp_path, "libuser.so", USER, needed=[linked], runpath="$ORIGIN/lib")
    agree(model().dlopen(str(user)), real(user))
    env = {"LD_LIBRARY_PATH": str(tmp_path / "lib")}
    plain = build(tmp_path / "plain", "libuser.so", USER, needed=[linked])
    agree(model(env).dlopen(str(plain)), real(plain, env))


# -- objects loaded earlier by others -----------------------------------------------------------


_EARLIER = """
import ctypes, json, os, sys
sys.path.insert(0, {root!r})
ctypes.CDLL({provider!r}, mode={mode})
from torchguard._platforms.linux.files import PosixFiles
from torchguard._platforms.linux.system import live_linux
from torchguard._platforms.linux.ldso import Ldso
from torchguard._platforms.linux.locate import environment
system = live_linux(None)
ldso = Ldso(PosixFiles(), environment(system))
ldso.start(system.executable, system.mapped)
result = ldso.dlopen({user!r})
error = result.error
try:
    ctypes.CDLL({user!r})
    real = True
except OSError:
    real = False
print(json.dumps([result.ok, error.kind if error else "", error.doubt if error else "", real]))
"""


@pytest.mark.parametrize("mode", ["RTLD_GLOBAL", "RTLD_LOCAL"])
def test_an_object_another_package_loaded_earlier_is_never_a_false_proof(
    tmp_path: Path, mode: str
) -> None:
    """Live, ``/proc/self/maps`` shows what is mapped but not whether it joined the global
    scope: a symbol only such an object defines makes the failure a doubt, not a proof."""
    import json

    provider = build(tmp_path / "pre", "libprovider.so", DEP)
    user = build(tmp_path, "libuser.so", USER)
    root = str(Path(__file__).resolve().parents[1])
    code = _EARLIER.format(root=root, provider=str(provider), user=str(user), mode=f"ctypes.{mode}")
    done = subprocess.run(
        [PYTHON, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    ok, kind, doubt, really = json.loads(done.stdout.strip().splitlines()[-1])
    assert really == (mode == "RTLD_GLOBAL")
    assert not ok and kind == SYMBOL and doubt  # either way: not a proof
    assert "libprovider.so" in doubt


def test_the_maps_reader_sees_an_earlier_global_load(tmp_path: Path) -> None:
    """The premise of the test above: the earlier object is mapped, so it is reused by name."""
    provider = build(tmp_path / "pre", "libprovider.so", DEP)
    import ctypes

    ctypes.CDLL(str(provider))
    assert str(provider) in {m.path for m in read_maps()}


def test_a_file_of_the_other_class_opened_by_path_fails_in_glibcs_words(tmp_path: Path) -> None:
    """No search, so no other candidate: ``wrong ELF class: ELFCLASS32``."""
    good = build(tmp_path / "src", "libdep.so", DEP)
    data = bytearray(good.read_bytes())
    data[4] = 1
    target = tmp_path / "libc32.so"
    target.write_bytes(bytes(data))
    agree(model().dlopen(str(target)), real(target))

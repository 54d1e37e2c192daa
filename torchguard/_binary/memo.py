"""The verdict memo: a process whose environment has not changed since a clean analysis skips it.

The start-up hook's guard inside ``import torch`` costs mostly the import of torchguard's
analysis (about 85 modules), not the warm analysis itself. After a full analysis (live, run
by the hook) that let ``import torch`` proceed, the guard stores a small memo per environment:
a fingerprint of everything the analysis depends on. The next hooked process recomputes it
here, with ``os`` and ``sys`` only (and, on Windows, :mod:`torchguard._binary.winapi`, which
adds ``ctypes`` and ``winreg``), and on an exact match lets ``import torch`` proceed without
importing the analysis. The hook prints nothing when an analysis passes, so a hit reproduces
its whole output; a run that writes ``TORCHGUARD_REPORT`` always analyses (the report is the
analysis's own).

The fingerprint (:func:`base` and the watched states): the interpreter (executable, version,
implementation, prefixes), torchguard's version, ``sys.path``, the import finders, the current
folder, the whole ``os.environ`` and what the process has loaded (a library loaded before
torch changes verdicts). Linux adds ``/proc/self/environ`` (the environment ld.so saw), the
user and group ids, ``uname``, ``/etc/ld.so.preload`` and the NVIDIA driver's version and
GPUs; Windows adds its version, System32's path, the KnownDLLs, Smart App Control and display
adapter registry values, the folders registered with ``os.add_dll_directory`` so far and KMP's
marker. Then the state (device, inode or file id, mode, size, modification and change or
creation times) of every file and folder the analysis validated or read (its cache keys:
torch's folders, each library or DLL it resolved, site-packages folders, RECORDs and
``version.py``; the system library folders, ``sys.path`` entries, ``LD_LIBRARY_PATH``
folders; on Windows the application's folder, System32, the current folder, ``PATH`` folders
and registered folders). Installing or removing a distribution changes its site-packages
folder's state; removing a file from ``torch/lib`` changes that folder's. A memo is written
only when every watched state is older than the analysis by :data:`RACY` seconds (a change
within a coarse clock's tick would go unseen), and each library the analysis's own imports
loaded meanwhile would be found by a search too.

On Windows the guard also acts: it registers the folders torch forgets and preloads DLLs. The
memo records those steps in order and a hit replays them (:func:`replay`); a step that fails
means the full analysis runs, and nothing is memoized from that process.

Any difference, a missing, unreadable, truncated, damaged or foreign memo, or any exception
means the full analysis runs: the memo can only skip work, never change a verdict.
"""

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~10 ms
if TYPE_CHECKING:
    from collections.abc import Iterable

FORMAT = "torchguard verdict memo 1"
FOLDER = "memo-v1"
VERDICT = "verdict import-torch-proceeds"
MAX_BYTES = 1 << 20  # a memo larger than this is not ours
RACY = 2.0  # seconds: as torchguard._binary.state.RACY (not imported: it would cost the hook)
FIXED = (
    "/etc/ld.so.cache",
    "/etc/ld.so.preload",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
    "/usr/lib/wsl/lib",
    "/usr/lib/wsl/drivers",
)
"""Files and folders watched whatever the analysis recorded: ld.so's own inputs."""

SYSTEM_DIRS = frozenset(FIXED[2:10])
"""glibc's trusted folders: a library mapped from one is found there by a search too."""

pending: "tuple[str, list[str], float, frozenset[str]] | None" = None
"""After a miss: (memo file, base fingerprint, when the check ran, the files mapped then),
for :func:`save`."""
passed = False
"""This process's guard was answered by the memo (its analysis never ran)."""


def on_windows() -> bool:
    return sys.platform == "win32"


def memo_file() -> "str | None":
    """This environment's memo, in torchguard's cache folder; None off Linux and Windows or
    when the cache is off. The folder is the one the facts cache uses (``TORCHGUARD_CACHE_DIR``,
    else as platformdirs names it: ``$XDG_CACHE_HOME/torchguard`` or ``~/.cache/torchguard``,
    ``%LOCALAPPDATA%\\torchguard\\Cache`` on Windows)."""
    environ = os.environ
    if environ.get("TORCHGUARD_CACHE", "").strip().lower() == "off":
        return None
    folder = environ.get("TORCHGUARD_CACHE_DIR")
    if on_windows():
        local = environ.get("LOCALAPPDATA", "")
        if not folder and not local.strip():
            return None  # platformdirs would ask the shell: no memo rather than another folder
        folder = folder or os.path.join(local, "torchguard", "Cache")
    elif not sys.platform.startswith("linux"):
        return None
    elif not folder:
        xdg = environ.get("XDG_CACHE_HOME", "")
        folder = os.path.join(xdg if xdg.strip() else os.path.expanduser("~/.cache"), "torchguard")
    return os.path.join(folder, FOLDER, _digest(sys.prefix + "\0" + sys.executable) + ".memo")


def _digest(text: str) -> str:
    """FNV-1a (64 bits): names a file; the memo's contents say whose it is."""
    value = 0xCBF29CE484222325
    for byte in text.encode("utf-8", "surrogateescape"):
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


def _read(path: str, limit: int = 1 << 16) -> "bytes | None":
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return None


def _listdir(path: str) -> "list[str] | None":
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def _mapped() -> "list[str] | None":
    """The files the process maps executable (what ld.so has loaded), sorted."""
    text = _read("/proc/self/maps", 1 << 24)
    if text is None:
        return None
    found = set()
    for line in text.decode("utf-8", "surrogateescape").splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and "x" in fields[1] and fields[5].startswith("/"):
            found.add(fields[5])
    return sorted(found)


def _name(thing: "object") -> str:
    """A finder's or path hook's name (its address would differ in every process)."""
    module = getattr(thing, "__module__", None) or type(thing).__module__
    return f"{module}.{getattr(thing, '__qualname__', type(thing).__qualname__)}"


def snapshot() -> "list[str] | None":
    """What the process has loaded: the files it maps executable (Linux), its modules in
    load order (Windows)."""
    if on_windows():
        from torchguard._binary import winapi

        return winapi.loaded_paths()
    return _mapped()


def base(mapped: "list[str] | None") -> "list[str]":
    """The fingerprint's lines that need no list of watched paths (one line each)."""
    from torchguard._version import __version__

    implementation = sys.implementation
    common = [
        FORMAT,
        f"torchguard {__version__!r}",
        f"python {sys.version!r} {sys.hexversion}",
        f"implementation {implementation.name!r} {implementation.cache_tag!r} "
        f"{getattr(sys, 'abiflags', None)!r}",
        f"prefix {(sys.prefix, sys.base_prefix, sys.exec_prefix)!r}",
        f"cwd {os.getcwd()!r}",
        f"path {sys.path!r}",
        f"finders {[_name(type(finder)) for finder in sys.meta_path]!r}",
        f"hooks {[_name(hook) for hook in sys.path_hooks]!r}",
        f"environ {sorted(os.environ.items())!r}",
        f"mapped {mapped!r}",
    ]
    return [*common, *(_windows_lines() if on_windows() else _linux_lines()), VERDICT]


def _linux_lines() -> "list[str]":
    try:
        exe = os.readlink("/proc/self/exe")
    except OSError:
        exe = None
    return [
        f"executable {sys.executable!r} {exe!r}",
        f"uname {tuple(os.uname())!r}",
        f"ids {(os.getuid(), os.geteuid(), os.getgid(), os.getegid())!r}",
        f"start-environ {_read('/proc/self/environ', 1 << 20)!r}",
        f"preload {_read('/etc/ld.so.preload')!r}",
        f"driver {_read('/proc/driver/nvidia/version')!r}",
        f"gpus {_listdir('/proc/driver/nvidia/gpus')!r}",
    ]


def _windows_lines() -> "list[str]":
    """What the live Windows analysis reads besides files: the registry's KnownDLLs, Smart
    App Control and display adapters, the folders registered so far, KMP's marker."""
    from torchguard._binary import winapi

    return [
        f"executable {sys.executable!r}",
        f"windows {winapi.windows_version()!r}",
        f"system {winapi.system_directory()!r}",
        f"known-dlls {winapi.known_dlls()!r}",
        f"smart-app-control {winapi.smart_app_control()!r}",
        f"adapters {winapi.display_adapters()!r}",
        f"registered {winapi.registered_dirs()!r}",
        f"kmp {winapi.kmp_marker()!r}",
    ]


def state(path: str) -> str:
    """What changes when ``path`` is replaced, rewritten, or (a folder) gains, loses or
    renames an entry; ``-`` when it cannot be stat-ed."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return "-"
    return (
        f"{info.st_dev}:{info.st_ino}:{info.st_mode}:{info.st_size}:"
        f"{info.st_mtime_ns}:{info.st_ctime_ns}"
    )


def fixed_paths() -> "list[str]":
    """Watched in every memo: the interpreter, ``sys.path`` entries (the current folder for
    an empty one), conda's marker folder; on Linux ld.so's files and folders and
    ``LD_LIBRARY_PATH`` folders; on Windows the process image and the loader's folders: the
    application's folder, System32, the current folder, ``PATH`` folders and the folders
    registered so far."""
    paths = [sys.executable, os.path.join(sys.prefix, "conda-meta")]
    paths += [os.path.abspath(entry or os.curdir) for entry in sys.path if isinstance(entry, str)]
    if on_windows():
        from torchguard._binary import winapi

        loaded = winapi.loaded_paths() or []
        system = winapi.system_directory()
        for image in loaded[:1]:  # the process image, whose header says the CPU, and its folder
            paths += [image, os.path.dirname(image)]
        paths += [system] if system else []
        paths += [os.getcwd(), *(p for p in winapi.registered_dirs() if isinstance(p, str))]
        search = os.environ.get("PATH", "").split(os.pathsep)
        return paths + [os.path.abspath(e) for e in search if e]
    library_path = os.environ.get("LD_LIBRARY_PATH", "")
    paths += [os.path.abspath(e or os.curdir) for e in library_path.replace(";", ":").split(":")]
    return [*FIXED, *paths]


def check() -> bool:
    """True when this environment's memo matches it exactly: ``import torch`` may proceed
    as the last full analysis let it, after the same folders are registered and DLLs
    preloaded (Windows), in the same order. Never raises; on a miss, :func:`save` may write
    one."""
    global pending, passed
    try:
        if os.environ.get("TORCHGUARD_REPORT"):
            return False  # the report is the analysis's own
        if os.environ.get("TORCHGUARD", "").strip().lower() not in ("", "strict", "warn"):
            return False  # off, or a value the hook warns about
        path = memo_file()
        if path is None:
            return False
        started = _now()
        mapped = snapshot()
        lines = base(mapped)
        pending = (path, lines, started, frozenset(mapped or ()))
        text = _read(path, MAX_BYTES + 1)
        if text is None or len(text) > MAX_BYTES:
            return False
        stored = text.decode("utf-8", "surrogateescape").split("\n")
        count = len(lines)
        if stored[:count] != lines or len(stored) < count + 2:
            return False
        watched, end = stored[count:-2], stored[-2:]
        if end != [f"end {len(watched)}", ""]:
            return False  # truncated, or not ours
        actions: list[tuple[str, str]] = []
        for line in watched:
            kind, _, rest = line.partition(" ")
            if kind in ACTIONS and rest:  # after every state line
                actions.append((kind, rest))
                continue
            seen, _, where = rest.partition(" ")
            if kind != "state" or actions or not where or state(where) != seen:
                return False
        if actions and not replay(actions):
            pending = None  # half done: the analysis runs, but what it sees is not memoized
            return False
    except Exception:  # the memo may only skip work: anything unexpected analyses
        pending = None
        return False
    pending = None
    passed = True
    return True


ACTIONS = ("register", "preload")
"""What the Windows guard does after a clean analysis, replayed in order on a hit."""

replayed: "list[tuple[str, object]]" = []
"""The folders a replay registered and their handles (``register`` adopts them, so a later
``ensure()`` does not register them twice)."""


def replay(actions: "list[tuple[str, str]]") -> bool:
    """Register each folder and preload each DLL as the analysis's guard did; False at the
    first step that fails (the full path then runs)."""
    if not on_windows():
        return False
    from torchguard._binary import winapi

    for kind, where in actions:
        if kind == "register":
            try:
                replayed.append((where, winapi.add_dll_directory(where)))
            except OSError:
                return False
        elif not winapi.preload(where):
            return False
    return True


def _same_search(before: "frozenset[str]", actions: "list[tuple[str, str]]") -> bool:
    """Whether the libraries loaded since the check (by the analysis's own imports: ``zlib``
    maps ``libz``) would be found by a search too, so a memo answer, which runs ``import
    torch`` without them, sees what the analysis saw. Linux: each from glibc's trusted
    folders, or a Python extension module (which no library names as a dependency). Windows:
    an extension module, or a DLL from System32, the application's folder, a folder the
    guard registered or a preloaded DLL's folder (the replay loads those again)."""
    if on_windows():
        return _same_windows_search(before, actions)
    for path in _mapped() or ():
        if path in before or os.path.dirname(path) in SYSTEM_DIRS:
            continue
        name = os.path.basename(path)
        if ".cpython-" in name or ".abi3." in name or "/lib-dynload/" in path:
            continue
        return False
    return True


def _same_windows_search(before: "frozenset[str]", actions: "list[tuple[str, str]]") -> bool:
    from torchguard._binary import winapi

    loaded = winapi.loaded_paths()
    if not loaded:
        return False
    folders = [os.path.dirname(loaded[0]), winapi.system_directory() or "?"]
    folders += [where if kind == "register" else os.path.dirname(where) for kind, where in actions]
    searched = {os.path.normcase(folder) for folder in folders}
    for path in loaded:
        if path in before or path.lower().endswith(".pyd"):
            continue
        if os.path.normcase(os.path.dirname(path)) not in searched:
            return False
    return True


def _now() -> float:
    import time

    return time.time()


def save(watched: "Iterable[str]", actions: "Iterable[tuple[str, str]]" = ()) -> bool:
    """After a clean analysis that :func:`check` missed: store the memo, with the guard's
    ``actions`` (Windows: ``("register", folder)`` and ``("preload", dll)``, in the order it
    took them), unless a watched state changed since :data:`RACY` seconds before the check
    (it may not be what the analysis read). True when written."""
    global pending
    if pending is None:
        return False
    path, lines, started, mapped = pending
    pending = None
    steps = [(kind, where) for kind, where in actions]
    if any(kind not in ACTIONS for kind, _ in steps) or not _same_search(mapped, steps):
        return False
    paths = dict.fromkeys([*fixed_paths(), *sorted(watched)])
    body: list[str] = []
    for where in paths:
        if not where or "\n" in where or "\r" in where:
            return False
        seen = state(where)
        if seen != "-" and int(seen.split(":")[4]) / 1e9 > started - RACY:
            return False  # modified too recently (as the facts cache's folder states)
        body.append(f"state {seen} {where}")
    for kind, where in steps:
        if not where or "\n" in where or "\r" in where:
            return False
        body.append(f"{kind} {where}")
    text = "\n".join([*lines, *body, f"end {len(body)}", ""])
    try:
        size = len(text.encode("utf-8"))  # as the writer encodes (a path it cannot: no memo)
    except UnicodeError:
        return False
    if size > MAX_BYTES:
        return False
    from pathlib import Path

    from torchguard._binary.cache import replace_text

    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return replace_text(target, text, newline="\n")  # read back byte for byte

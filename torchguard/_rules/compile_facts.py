"""What ``torch.compile`` needs from an interpreter, as facts: one pure function of data.

Shared by the ``compile-not-ready`` rules (Windows: :mod:`.compile_ready`; Linux:
:mod:`.linux_compile`) and ``torchguard doctor --compile``, which feed it the same questions
from different places: a rule from the analysed tree, doctor from the running process.

What triton looks for, by its own ``triton/runtime/build.py``: ``Python.h`` in the
interpreter's include folder (``sysconfig.get_paths()["include"]``); on Windows also
``libs\\python3XY.lib`` (``python3XYt.lib`` free-threaded) beside ``sys.exec_prefix``,
``sys.base_exec_prefix`` or python.exe; and a C compiler: ``CC``, else (triton-windows) a
Visual Studio developer shell, the TinyCC it bundles (``triton\\runtime\\tcc\\tcc.exe``),
``cl``, ``gcc`` or ``clang`` on PATH; on Linux ``gcc``, else ``clang`` on PATH.
"""

from __future__ import annotations

import ntpath
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torchguard._facts.triton_pairs import minor, paired_triton_windows

#: The distributions that are triton, by platform (canonical names, the first installed wins).
TRITON_WINDOWS = ("triton-windows", "triton")
TRITON_LINUX = ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu")
WINDOWS_COMPILERS = ("cl.exe", "gcc.exe", "clang.exe")
LINUX_COMPILERS = ("gcc", "clang")


def _never(_path: str) -> bool:
    return False


@dataclass(frozen=True)
class Triton:
    """An installed triton distribution."""

    name: str
    version: str
    site_dir: str


@dataclass(frozen=True)
class CompileInputs:
    """Everything the facts are computed from; paths in the platform's own spelling."""

    windows: bool
    python_version: tuple[int, int]
    include_dir: str
    """The folder ``Python.h`` must be in."""
    free_threaded: bool = False
    lib_homes: tuple[str, ...] = ()
    """Windows: the folders whose ``libs`` may hold ``python3XY.lib``."""
    environ: Mapping[str, str] = field(default_factory=dict)
    path_dirs: tuple[str, ...] = ()
    torch_version: str | None = None
    triton: Triton | None = None
    triton_pin: str | None = None
    """Linux: the triton version torch's METADATA pins with ``==`` (None: none read)."""
    triton_pin_name: str = "triton"
    """Linux: the distribution that pin names (``pytorch-triton`` for nightlies)."""
    is_file: Callable[[str], bool] = _never


@dataclass(frozen=True)
class Pairing:
    """Whether the installed triton pairs with the installed torch."""

    triton: Triton
    torch_version: str
    wanted: str
    """The paired release: a minor (``3.5``, Windows) or torch's exact pin (Linux)."""
    pairs: bool
    spec: str
    """What pip must be asked for: ``triton-windows<3.6`` or ``triton==3.5.1``."""


@dataclass(frozen=True)
class CompileFact:
    """One thing torch.compile needs: found or missing, and where it was looked for."""

    name: str
    found: bool
    detail: str
    looked_at: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "found": self.found,
            "detail": self.detail,
            "looked_at": list(self.looked_at),
        }


@dataclass(frozen=True)
class CompileFacts:
    triton: CompileFact
    compiler: CompileFact
    header: CompileFact
    library: CompileFact | None
    """Windows only: ``python3XY.lib``."""
    pairing: Pairing | None
    """None: no triton, no torch, or a pairing nobody states (unknown: no verdict)."""

    @property
    def all(self) -> tuple[CompileFact, ...]:
        return tuple(f for f in (self.triton, self.compiler, self.header, self.library) if f)

    @property
    def missing_files(self) -> tuple[CompileFact, ...]:
        """What the launcher's build needs from the interpreter and does not find."""
        return tuple(f for f in (self.header, self.library) if f is not None and not f.found)

    def to_dict(self) -> dict[str, Any]:
        pairing = self.pairing
        return {
            "facts": [f.to_dict() for f in self.all],
            "pairs": None if pairing is None else pairing.pairs,
            "paired_triton": None if pairing is None else pairing.spec,
        }


def pairing(inputs: CompileInputs) -> Pairing | None:
    """The triton <-> torch pairing (None: nothing installed to pair, or no known answer)."""
    triton, torch = inputs.triton, inputs.torch_version
    if triton is None or torch is None:
        return None
    if inputs.windows:
        wanted = paired_triton_windows(torch)
        if wanted is None or triton.name != "triton-windows" or minor(triton.version) is None:
            return None
        text = f"{wanted[0]}.{wanted[1]}"
        spec = f"triton-windows<{wanted[0]}.{wanted[1] + 1}"
        return Pairing(triton, torch, text, minor(triton.version) == wanted, spec)
    pin = inputs.triton_pin
    if pin is None:
        return None
    same = triton.version == pin or triton.version.partition("+")[0] == pin
    return Pairing(triton, torch, pin, same, f"{triton.name}=={pin}")


def _triton_fact(inputs: CompileInputs, paired: Pairing | None) -> CompileFact:
    triton = inputs.triton
    names = TRITON_WINDOWS if inputs.windows else TRITON_LINUX
    if triton is None:
        wanted = ""
        if inputs.triton_pin is not None and inputs.torch_version is not None:
            wanted = (
                f"; torch {inputs.torch_version} pins {inputs.triton_pin_name}=={inputs.triton_pin}"
            )
        elif inputs.windows and inputs.torch_version is not None:
            known = paired_triton_windows(inputs.torch_version)
            if known is not None:
                release = f"{known[0]}.{known[1]}"
                wanted = f"; torch {inputs.torch_version} pairs with triton-windows {release}"
        return CompileFact(
            "triton", False, f"not installed (looked for {', '.join(names)}){wanted}"
        )
    where = (triton.site_dir,)
    text = f"{triton.name} {triton.version}"
    torch = inputs.torch_version
    if torch is None:
        return CompileFact("triton", True, f"{text}; torch not installed", where)
    if paired is None:
        return CompileFact("triton", True, f"{text}; pairing with torch {torch} unknown", where)
    if paired.pairs:
        return CompileFact("triton", True, f"{text}; pairs with torch {torch}", where)
    return CompileFact(
        "triton",
        True,
        f"{text}; does NOT pair with torch {torch} (it wants {paired.spec})",
        where,
    )


def _compiler_fact(inputs: CompileInputs, join: Callable[..., str]) -> CompileFact:
    environ = dict(inputs.environ)
    if inputs.windows:  # Windows names are case-insensitive
        environ = {k.upper(): v for k, v in environ.items()}
    if environ.get("CC") is not None:  # triton: os.environ.get("CC")
        return CompileFact("C compiler", True, f"CC={environ['CC']}", ("CC",))
    looked: list[str] = ["CC"]
    if inputs.windows:
        if environ.get("VCTOOLSINSTALLDIR") is not None:
            tools = environ["VCTOOLSINSTALLDIR"]
            return CompileFact("C compiler", True, f"Visual Studio developer shell ({tools})")
        looked.append("VCToolsInstallDir")
        if inputs.triton is not None:
            tcc = join(inputs.triton.site_dir, "triton", "runtime", "tcc", "tcc.exe")
            if inputs.is_file(tcc):
                return CompileFact("C compiler", True, f"bundled TinyCC {tcc}", (tcc,))
            looked.append(tcc)
    names = WINDOWS_COMPILERS if inputs.windows else LINUX_COMPILERS
    for name in names:  # triton's order: the first name found on PATH wins
        for folder in inputs.path_dirs:
            candidate = join(folder, name)
            if inputs.is_file(candidate):
                return CompileFact("C compiler", True, candidate, (candidate,))
    looked.append(f"{', '.join(names)} on PATH ({len(inputs.path_dirs)} folders)")
    return CompileFact("C compiler", False, "none found", tuple(looked))


def compile_facts(inputs: CompileInputs) -> CompileFacts:
    """The facts torch.compile needs from ``inputs`` (reads nothing: ``is_file`` does)."""
    join: Callable[..., str] = ntpath.join if inputs.windows else posixpath.join
    major, minor_ = inputs.python_version
    header_path = join(inputs.include_dir, "Python.h")
    header = CompileFact(
        "Python.h",
        inputs.is_file(header_path),
        header_path if inputs.is_file(header_path) else "missing",
        (header_path,),
    )
    library = None
    if inputs.windows:
        lib = f"python{major}{minor_}{'t' if inputs.free_threaded else ''}.lib"
        candidates = tuple(join(home, "libs", lib) for home in dict.fromkeys(inputs.lib_homes))
        found = next((c for c in candidates if inputs.is_file(c)), None)
        library = CompileFact(lib, found is not None, found or "missing", candidates)
    paired = pairing(inputs)
    return CompileFacts(
        _triton_fact(inputs, paired), _compiler_fact(inputs, join), header, library, paired
    )

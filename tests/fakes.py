"""Fake Windows installs on disk (and as wheels) made of tiny in-memory-built PE files."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pe_builder import AMD64, ARM64, DEFAULT_SYMBOL, I386, build_pe

KERNEL = ("KERNEL32.dll", "VCRUNTIME140.dll", "api-ms-win-crt-runtime-l1-1-0.dll")

#: A miniature of torch 2.4.1's real import graph (see failure-catalog.md section 0).
TORCH_241_GRAPH: dict[str, tuple[str, ...]] = {
    "asmjit.dll": KERNEL,
    "c10.dll": ("MSVCP140.dll", "dbghelp.dll", "ADVAPI32.dll", *KERNEL),
    "fbgemm.dll": ("asmjit.dll", "libiomp5md.dll", "MSVCP140.dll", *KERNEL),
    "libiomp5md.dll": KERNEL,
    "shm.dll": ("torch_cpu.dll", "c10.dll", *KERNEL),
    "torch.dll": KERNEL,
    "torch_cpu.dll": ("c10.dll", "fbgemm.dll", "libiomp5md.dll", "uv.dll", "MSVCP140.dll", *KERNEL),
    "torch_global_deps.dll": KERNEL,
    "torch_python.dll": ("shm.dll", "python311.dll", "torch_cpu.dll", "c10.dll", *KERNEL),
    "uv.dll": ("PSAPI.DLL", "USER32.dll", "WS2_32.dll", *KERNEL),
}


#: What torch 2.9.0 to 2.14.1 take from msvcp140.dll for std::mutex: they lock mutexes and
#: construct none (the 14.40 STL's constexpr constructor lays them out).
CONSTEXPR_MUTEX = ("_Mtx_lock", "_Mtx_unlock", "_Cnd_wait", "_Cnd_broadcast")
#: What torch 2.15.0 takes: the runtime's constructors too.
RUNTIME_MUTEX = (*CONSTEXPR_MUTEX, "_Mtx_init_in_situ", "_Cnd_init_in_situ")
#: What every fake msvcp140.dll of :func:`system32` exports (Microsoft's has all of these).
MSVCP140_EXPORTS = (DEFAULT_SYMBOL, *RUNTIME_MUTEX)


@dataclass
class FakeTorch:
    """A site-packages tree holding a fake torch; ``files`` maps relative paths to bytes."""

    version: str = "2.4.1+cpu"
    graph: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(TORCH_241_GRAPH))
    python_tag: str = "cp311"
    cuda: str | None = None
    extra: dict[str, bytes] = field(default_factory=dict)
    linker: tuple[int, int] = (14, 29)
    platform: str = "win_amd64"
    mutex: tuple[str, ...] = ()
    """What its binaries that import msvcp140.dll take from it besides the default symbol
    (:data:`CONSTEXPR_MUTEX`, :data:`RUNTIME_MUTEX`)."""

    @property
    def machine(self) -> int:
        return {"win_amd64": AMD64, "win32": I386, "win_arm64": ARM64}[self.platform]

    def files(self) -> dict[str, bytes]:
        files: dict[str, bytes] = {
            "torch/__init__.py": b"# fake torch\n",
            "torch/version.py": (
                f"__version__ = '{self.version}'\ncuda: 'Optional[str]' = {self.cuda!r}\n"
            ).encode(),
            f"torch/_C.{self.python_tag}-{self.platform}.pyd": build_pe(
                ["torch_python.dll", *KERNEL], linker=self.linker, machine=self.machine
            ),
        }
        for name, imports in self.graph.items():
            symbols = {
                dll: (DEFAULT_SYMBOL, *self.mutex)
                for dll in imports
                if self.mutex and dll.lower() == "msvcp140.dll"
            }
            files[f"torch/lib/{name}"] = build_pe(
                imports, linker=self.linker, machine=self.machine, symbols=symbols
            )
        files.update(self.extra)
        info = f"torch-{self.version}.dist-info"
        files[f"{info}/METADATA"] = (
            f"Metadata-Version: 2.1\nName: torch\nVersion: {self.version}\n".encode()
        )
        files[f"{info}/WHEEL"] = (
            f"Wheel-Version: 1.0\nTag: {self.python_tag}-{self.python_tag}-{self.platform}\n".encode()
        )
        files[f"{info}/INSTALLER"] = b"pip\n"
        files[f"{info}/RECORD"] = record(files, info)
        return files

    def write(self, site: Path) -> Path:
        write_tree(site, self.files())
        return site

    def wheel(self, directory: Path) -> Path:
        tags = f"{self.python_tag}-{self.python_tag}-{self.platform}"
        path = directory / f"torch-{self.version}-{tags}.whl"
        write_wheel(path, self.files())
        return path


def record(files: dict[str, bytes], info: str) -> bytes:
    lines = []
    for name, data in sorted(files.items()):
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    lines.append(f"{info}/RECORD,,")
    return ("\n".join(lines) + "\n").encode()


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def write_wheel(path: Path, files: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)


def system32(
    root: Path,
    names: Sequence[str] = ("msvcp140.dll", "vcruntime140_1.dll"),
    version: tuple[int, int, int, int] | None = None,
    machine: int = AMD64,
) -> Path:
    """A folder standing in for System32 with the given (tiny, valid) DLLs."""
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        exports = MSVCP140_EXPORTS if name.lower() == "msvcp140.dll" else (DEFAULT_SYMBOL,)
        data = build_pe(["KERNEL32.dll"], file_version=version, machine=machine, exports=exports)
        (root / name).write_bytes(data)
    return root


def companion(
    name: str, version: str, files: dict[str, bytes], site_relative: dict[str, str]
) -> dict[str, bytes]:
    """A companion distribution: ``files`` by site-relative path, RECORD included."""
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    out = dict(files)
    out[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    out[f"{info}/INSTALLER"] = b"pip\n"
    record_files = {site_relative.get(k, k): v for k, v in files.items()}
    out[f"{info}/RECORD"] = record(record_files, info)
    return out

"""What mapping torch's DLLs charges against the system commit limit (WinError 1455).

Windows charges commit when a view is mapped for every page that could become private to the
process: in an image, the sections marked writable (IMAGE_SCN_MEM_WRITE), mapped copy-on-write.
Read-only sections are backed by the DLL file itself and cost no commit. NVIDIA's fatbin
section (``.nv_fatb``, hundreds of MB of GPU code per DLL) is where this matters: binaries
built with CUDA 11 toolchains mark it writable (the public fixNvPe.py analysis of WinError
1455; onnxruntime-gpu 1.12 to 1.15, built with CUDA 11.4 to 11.8, ship it writable), so each
process importing them is charged its full size; NVIDIA's own CUDA 11.8 and 12.x DLLs and
CUDA 12 builds map it read-only. The estimate is computed from the section tables alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchguard._binary.pe.sections import Section


@dataclass(frozen=True)
class DllCommit:
    """One DLL's share: its copy-on-write bytes, and its ``.nv_fatb`` among them."""

    name: str
    writable: int
    writable_fatbin: int


def dll_commit(name: str, sections: tuple[Section, ...]) -> DllCommit:
    writable = [s for s in sections if s.writable]
    return DllCommit(
        name,
        sum(s.mapped_size for s in writable),
        sum(s.mapped_size for s in writable if s.name == ".nv_fatb"),
    )


@dataclass(frozen=True)
class CommitEstimate:
    """The commit one process is charged for mapping these DLLs (heap, CUDA context excluded)."""

    dlls: tuple[DllCommit, ...]

    @property
    def per_process(self) -> int:
        return sum(d.writable for d in self.dlls)

    @property
    def fatbin(self) -> int:
        return sum(d.writable_fatbin for d in self.dlls)

    def largest(self, count: int = 3) -> tuple[DllCommit, ...]:
        return tuple(sorted(self.dlls, key=lambda d: (-d.writable, d.name))[:count])

    def processes_that_fit(self, available: int) -> int:
        """How many processes importing torch the available commit holds (by this estimate)."""
        return available // self.per_process if self.per_process else 1 << 30


def mib(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MiB"


__all__ = ["CommitEstimate", "DllCommit", "dll_commit", "mib"]

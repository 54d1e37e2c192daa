"""Which GPU architectures each (torch release, CUDA variant) build really carries.

Build policy, not toolkit capability: CUDA 12.8 can still compile Maxwell and Pascal, yet
PyTorch's cu128 builds of 2.8 and later carry no sm_50/sm_60 kernels (the cu126 builds keep
them); the cu128 builds of 2.11 drop Volta (sm_70); CUDA 13 builds start at Turing (sm_75).
So "can CUDA X.Y build for this GPU" (:func:`torchguard._facts.gpus.cuda_can_build`) is the
wrong question; "did PyTorch build this variant for it" is this table.

Each row gives the SASS (and PTX) architectures of ``libtorch_cuda.so`` / ``torch_cuda.dll``
for a range of release series and one CUDA variant. Rows marked ``verified`` were read from
the fatbin of the real PyPI Linux wheel (``tests/readings/read_torch_archs.py``, torchguard's
reader);
the others are ``stated`` by PyTorch's build configuration (``TORCH_CUDA_ARCH_LIST`` in
``.ci/manywheel/build_cuda.sh`` for Linux and ``.ci/pytorch/windows/cudaXYZ.bat`` for
Windows), cited per row. Windows lists add sm_61 where Linux relies on sm_60 SASS (which runs
on sm_61); neither changes which GPU runs, so one row serves both platforms. Where the two could
differ, PyTorch's own record says they do not: its Windows 12.8 build already had sm_70 when
2.8 restored it on Linux (pytorch/pytorch#158126), its list was aligned with Linux's 7.0 to 12.0
in October 2025 (#164470), and 2.11's support matrix gives Turing and up for "Linux x86 and
Windows builds" alike (#172352). The Windows lists are stated, never read from a binary:
PyTorch's Windows CUDA wheels are published only on its own index, which the machines that
make this table cannot reach. A reading samples
the first 64 containers (translation units), each built for the whole ``TORCH_CUDA_ARCH_LIST``;
the few units built for extra architecture-specific targets (sm_89 or sm_90a FP8 kernels) are
not in the rows, and they change no GPU's verdict (sm_86 SASS runs on sm_89).
"""

from __future__ import annotations

from dataclasses import dataclass

from torchguard._facts.gpus import Capability

Series = tuple[int, int]
Cuda = tuple[int, int]

_LINUX = "pytorch/pytorch .ci/manywheel/build_cuda.sh (v{}) TORCH_CUDA_ARCH_LIST"
_WINDOWS = "pytorch/pytorch .ci/pytorch/windows/cuda{}.bat TORCH_CUDA_ARCH_LIST"
_PYPI = "PyPI's Linux wheels (libtorch_cuda.so .nv_fatbin, tests/readings/read_torch_archs.py)"


@dataclass(frozen=True)
class BuildArchs:
    """The kernels of one CUDA variant over a range of torch release series."""

    first: Series
    last: Series
    cuda: Cuda
    sass: frozenset[int]
    ptx: frozenset[int]
    read: tuple[str, ...]
    """Releases whose real wheel of this variant was read (its fatbin gave these lists); the
    other releases of the range are stated by :attr:`source`. Empty: stated only."""
    source: str

    @property
    def verified(self) -> bool:
        return bool(self.read)

    def provenance(self, version: str) -> str:
        """Where the lists for torch ``version`` come from, as a user can check it."""
        base = version.partition("+")[0]
        if base in self.read:
            return f"read from the real {base} wheel's fatbin"
        if self.read:
            return (
                f"read from the {', '.join(self.read)} wheels of this variant; "
                f"{self.source} keeps the list for the releases between"
            )
        return f"as PyTorch's build scripts state: {self.source}"

    def runs_on(self, capability: tuple[int, int]) -> bool:
        """SASS of the same major at an equal or lower minor, or PTX of an equal or older
        architecture the driver JIT-compiles (as :meth:`FatbinArchs.runs_on`)."""
        arch = capability[0] * 10 + capability[1]
        if any(s // 10 == capability[0] and s <= arch for s in self.sass):
            return True
        return any(p <= arch for p in self.ptx)


def _archs(*values: int) -> frozenset[int]:
    return frozenset(values)


_LEGACY = _archs(50, 60, 70, 75, 80, 86, 90)  # Maxwell to Hopper
_VOLTA_UP = _archs(70, 75, 80, 86, 90, 100, 120)
_TURING_UP = _archs(75, 80, 86, 90, 100, 120)
_NONE = _archs()
_KEPLER_UP = _archs(37, 50, 60, 70, 75, 80, 86)

BUILD_ARCHS: tuple[BuildArchs, ...] = (
    BuildArchs((2, 0), (2, 0), (11, 7), _KEPLER_UP, _NONE, ("2.0.1",), _PYPI),
    BuildArchs((2, 0), (2, 7), (11, 8), _LEGACY, _NONE, (), _LINUX.format("2.5.1")),
    BuildArchs(
        (2, 1), (2, 5), (12, 1), _LEGACY, _NONE, ("2.1.2", "2.2.2", "2.3.1", "2.4.1"), _PYPI
    ),
    BuildArchs((2, 4), (2, 6), (12, 4), _LEGACY, _NONE, ("2.5.1", "2.6.0"), _PYPI),
    BuildArchs(
        (2, 6),
        (2, 14),
        (12, 6),
        _LEGACY,
        _NONE,
        ("2.7.0", "2.7.1"),
        _WINDOWS.format("126")
        + "; 2.14.0+cu126's get_arch_list() quoted in hvoss-tech/AutoForge#59",
    ),
    BuildArchs(
        (2, 7),
        (2, 7),
        (12, 8),
        _TURING_UP,
        _NONE,
        (),
        "pytorch/pytorch#157517 restored sm_70 to the CUDA 12.8 list for 2.8: 2.7's started at 7.5",
    ),
    BuildArchs(
        (2, 8), (2, 10), (12, 8), _VOLTA_UP, _NONE, ("2.8.0", "2.9.0", "2.9.1", "2.10.0"), _PYPI
    ),
    BuildArchs((2, 8), (2, 10), (12, 9), _VOLTA_UP, _archs(120), (), _LINUX.format("2.10.0")),
    BuildArchs((2, 11), (2, 11), (12, 8), _TURING_UP, _NONE, (), _WINDOWS.format("128")),
    BuildArchs(
        (2, 9),
        (2, 15),
        (13, 0),
        _TURING_UP,
        _NONE,
        ("2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1"),
        _WINDOWS.format("130"),
    ),
    BuildArchs((2, 12), (2, 15), (13, 2), _TURING_UP, _NONE, ("2.15.0",), _WINDOWS.format("130")),
)


def build_archs(version: str, cuda: Cuda) -> BuildArchs | None:
    """The row for torch ``version`` (``2.8.0``, ``2.8.0+cu128``) built for ``cuda``; None when
    the table does not know that build (then nothing is claimed about its kernels)."""
    parts = version.partition("+")[0].split(".")
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    series = (int(parts[0]), int(parts[1]))
    return next(
        (row for row in BUILD_ARCHS if row.cuda == cuda and row.first <= series <= row.last),
        None,
    )


def carries_kernels(version: str, cuda: Cuda, capability: Capability) -> bool:
    """Whether torch ``version`` built for ``cuda`` is known to have kernels a GPU of
    ``capability`` runs: the table's row says so. A build the table does not know (older than
    2.0) is never recommended on what its CUDA version could compile: that is toolkit
    capability, not what PyTorch built."""
    row = build_archs(version, cuda)
    return row is not None and row.runs_on(capability)


__all__ = ["BUILD_ARCHS", "BuildArchs", "build_archs", "carries_kernels"]

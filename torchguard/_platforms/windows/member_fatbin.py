"""GPU architectures of a DLL inside a wheel, read from the member's stream (headers only).

An offline ``scan``/``check --gpu`` of a torch CUDA wheel judges ``torch_cuda.dll`` as an
installed copy is judged: by the ``.nv_fatb`` section it really carries. The member is inflated
forward once, its section table taken from the first page, everything before the section read
past, then only the fatbin headers kept (:func:`parse_fatbin_stream`); nothing is written to
disk and memory stays a few MiB however large the DLL.
"""

from __future__ import annotations

from torchguard._binary.fatbin import FatbinArchs, FatbinError, nv_fatb_span, parse_fatbin_stream
from torchguard._binary.stream import CHUNK, read_exactly
from torchguard._platforms.windows.tree import (
    ZIP_ERRORS,
    DamagedMember,
    MemberStream,
    WinTree,
    ZipMember,
)

_HEAD = 0x1000


def member_archs(tree: WinTree, member: ZipMember) -> FatbinArchs | None:
    """The architectures in a wheel member's ``.nv_fatb``; None when it has no such section.

    Raises :class:`FatbinError` for a damaged member, section or archive.
    """
    try:
        with MemberStream(tree.archive(member.archive), member.member) as stream:
            head = read_exactly(stream, _HEAD)
            span = nv_fatb_span(head)
            if span is None:
                return None
            offset, size = span
            if offset + size > member.size:
                raise FatbinError(f"{member.origin}: .nv_fatb ends past the end of the file")
            if offset < len(head):  # a small DLL: the section starts within the first page
                return parse_fatbin_stream(_Prefixed(head[offset:], stream), size)
            left = offset - len(head)
            while left > 0:  # read past what precedes the section
                chunk = stream.read(min(CHUNK, left))
                if not chunk:
                    raise FatbinError(f"{member.origin}: the data ends before .nv_fatb")
                left -= len(chunk)
            return parse_fatbin_stream(stream, size)
    except FatbinError:
        raise
    except (DamagedMember, *ZIP_ERRORS) as exc:
        raise FatbinError(f"{member.origin}: {exc}") from None


class _Prefixed:
    """``head`` (already read), then the rest of ``stream``."""

    def __init__(self, head: bytes, stream: MemberStream) -> None:
        self.head = head
        self.stream = stream

    def read(self, size: int = -1, /) -> bytes:
        if not self.head:
            return self.stream.read(size)
        size = len(self.head) if size < 0 else size
        taken, self.head = self.head[:size], self.head[size:]
        return taken


__all__ = ["member_archs"]

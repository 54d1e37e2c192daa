"""Whether a PE image carries an embedded Authenticode signature, from its headers alone.

The optional header's security data directory (index 4, ``IMAGE_DIRECTORY_ENTRY_SECURITY``)
gives the file offset and size of the ``WIN_CERTIFICATE`` table appended to the file; an
unsigned image has size 0. Windows' own DLLs are catalog-signed (no embedded signature), so
this says something only about files outside the Windows folders. Read from the first bytes
of the file, without pefile: the real wheels' ``cudnn64_9.dll`` (NVIDIA) and ``libiomp5md.dll``
(Intel) carry one, ``ctranslate2.dll`` and bitsandbytes' DLLs do not.
"""

from __future__ import annotations

import struct

#: Enough for the headers of any image the loader maps (they precede the first section).
HEAD = 4096

_SECURITY = 4
_PE32, _PE32_PLUS = 0x10B, 0x20B


def signature_size(head: bytes) -> int | None:
    """The size of the embedded certificate table (0: unsigned); None when ``head`` is not
    the start of a readable PE image."""
    if len(head) < 0x40 or head[:2] != b"MZ":
        return None
    (e_lfanew,) = struct.unpack_from("<I", head, 0x3C)
    optional = e_lfanew + 24
    if optional + 2 > len(head) or head[e_lfanew : e_lfanew + 4] != b"PE\0\0":
        return None
    (magic,) = struct.unpack_from("<H", head, optional)
    if magic == _PE32:
        count_at, directories = optional + 92, optional + 96
    elif magic == _PE32_PLUS:
        count_at, directories = optional + 108, optional + 112
    else:
        return None
    entry = directories + 8 * _SECURITY
    if entry + 8 > len(head):
        return None
    (count,) = struct.unpack_from("<I", head, count_at)
    if count <= _SECURITY:
        return 0
    _offset, size = struct.unpack_from("<II", head, entry)
    return int(size)

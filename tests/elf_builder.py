"""Build small, valid ELF shared objects in memory for unit tests.

One ``PT_LOAD`` maps the whole file at address 0 (a second one, at another address, holds
``.dynstr`` when asked, as patchelf lays torch 2.9.1 out), with ``PT_DYNAMIC`` and optionally
``PT_INTERP``, ``PT_TLS`` and ``PT_GNU_STACK``. The sections (with headers, so readelf can
judge the result) are ``.dynsym``, ``.dynstr``, ``.gnu.hash`` or ``.hash``, ``.gnu.version``,
``.gnu.version_d``, ``.gnu.version_r``, ``.dynamic`` and ``.nv_fatbin``. ELF64 and ELF32, both
byte orders.

Symbols are written as the linker's version-script syntax shows them: ``"foo"`` (unversioned),
``"foo@@V"`` (the default version V), ``"foo@V"`` (hidden); a versioned reference is
``("foo", "V", "libbar.so.1")``.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

EM_X86_64 = 62
EM_AARCH64 = 183
EM_386 = 3

DT_NEEDED, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT = 1, 4, 5, 6, 10, 11
DT_SONAME, DT_RPATH, DT_RUNPATH, DT_FLAGS = 14, 15, 29, 30
DT_GNU_HASH, DT_VERSYM, DT_FLAGS_1 = 0x6FFFFEF5, 0x6FFFFFF0, 0x6FFFFFFB
DT_VERDEF, DT_VERDEFNUM, DT_VERNEED, DT_VERNEEDNUM = 0x6FFFFFFC, 0x6FFFFFFD, 0x6FFFFFFE, 0x6FFFFFFF


def elf_hash(name: bytes) -> int:
    """The System V ELF hash (version entries and DT_HASH use it)."""
    value = 0
    for byte in name:
        value = ((value << 4) + byte) & 0xFFFFFFFF
        high = value & 0xF0000000
        if high:
            value ^= high >> 24
        value &= ~high & 0xFFFFFFFF
    return value


def gnu_hash(name: bytes) -> int:
    value = 5381
    for byte in name:
        value = (value * 33 + byte) & 0xFFFFFFFF
    return value


class _Strings:
    def __init__(self) -> None:
        self.data = bytearray(b"\0")
        self.at: dict[bytes, int] = {b"": 0}

    def add(self, text: str | bytes) -> int:
        raw = text.encode() if isinstance(text, str) else text
        if raw not in self.at:
            self.at[raw] = len(self.data)
            self.data += raw + b"\0"
        return self.at[raw]


@dataclass
class _Symbol:
    name: str
    version: str | None
    hidden: bool
    defined: bool
    weak: bool
    file: str | None = None
    kind: int = 2  # STT_FUNC


@dataclass
class _Blob:
    name: str
    data: bytes
    kind: int
    align: int = 8
    link: str | None = None
    info: int = 0
    entsize: int = 0
    offset: int = 0
    flags: int = 2  # SHF_ALLOC
    sections: list[str] = field(default_factory=list)


def build_elf(
    needed: Sequence[str] = (),
    *,
    soname: str | None = None,
    rpath: str | None = None,
    runpath: str | None = None,
    flags: int = 0,
    flags_1: int = 0,
    defined: Sequence[str] = (),
    undefined: Sequence[str | tuple[str, str, str]] = (),
    weak: Collection[str] = (),
    versions: Sequence[str] = (),
    weak_needs: Collection[str] = (),
    machine: int = EM_X86_64,
    bits: int = 64,
    little: bool = True,
    interpreter: str | None = None,
    tls_size: int = 0,
    exec_stack: bool | None = False,
    fatbin: bytes | None = None,
    rodata: bytes | None = None,
    hash_style: str = "gnu",
    dynstr_segment: bool = False,
    extra_dynamic: Sequence[tuple[int, int]] = (),
    section_headers: bool = True,
    elf_type: int = 3,
    code: bytes | None = None,
    gnu_symoffset: int | None = None,
    version_definitions: bool = True,
) -> bytes:
    """Bytes of an ELF shared object (``elf_type`` 3, ET_DYN) with these dynamic facts.

    ``defined``/``undefined`` name symbols (see the module docstring); ``weak`` names those
    bound weakly; ``versions`` adds version definitions nobody uses; ``weak_needs`` marks
    needed versions VER_FLG_WEAK; ``hash_style`` is ``gnu``, ``sysv`` or ``none``; ``code``
    is placed as ``.text`` in an executable segment between the tables and ``.dynamic``;
    ``version_definitions=False`` leaves out ``.gnu.version_d`` (an object with no versions).
    """
    o = "<" if little else ">"
    wide = bits == 64
    addr = "Q" if wide else "I"
    strings = _Strings()
    # Symbols: undefined first, then defined (the GNU hash table covers the defined ones).
    symbols: list[_Symbol] = []
    for ref in undefined:
        if isinstance(ref, tuple):
            symbols.append(_Symbol(ref[0], ref[1], False, False, ref[0] in weak, ref[2]))
        else:
            symbols.append(_Symbol(ref, None, False, False, ref in weak))
    for spec in defined:
        if "@@" in spec:
            name, version = spec.split("@@")
            symbols.append(_Symbol(name, version, False, True, name in weak))
        elif "@" in spec:
            name, version = spec.split("@")
            symbols.append(_Symbol(name, version, True, True, name in weak))
        else:
            symbols.append(_Symbol(spec, None, False, True, spec in weak))
    # Version definitions: the base node (the soname), then every version used or asked for.
    def_names: list[str] = []
    for name in [*versions, *(s.version for s in symbols if s.defined and s.version)]:
        if name and name not in def_names:
            def_names.append(name)
    def_index = {name: 2 + index for index, name in enumerate(def_names)}
    # Version needs: per file, in order of first use.
    needs: dict[str, list[str]] = {}
    for symbol in symbols:
        if not symbol.defined and symbol.version and symbol.file:
            wanted = needs.setdefault(symbol.file, [])
            if symbol.version not in wanted:
                wanted.append(symbol.version)
    need_index: dict[tuple[str, str], int] = {}
    next_index = 2 + len(def_names)
    for file, wanted in needs.items():
        for version in wanted:
            need_index[(file, version)] = next_index
            next_index += 1

    needed_at = [strings.add(name) for name in needed]
    soname_at = strings.add(soname) if soname is not None else None
    rpath_at = strings.add(rpath) if rpath is not None else None
    runpath_at = strings.add(runpath) if runpath is not None else None
    base_name = soname or "libtest.so"

    # .dynsym
    sym = struct.Struct(o + "IBBHQQ") if wide else struct.Struct(o + "IIIBBH")
    table = bytearray(sym.size)  # the null symbol
    versym = bytearray(struct.pack(o + "H", 0))
    for index, symbol in enumerate(symbols, 1):
        bind = 2 if symbol.weak else 1
        info = (bind << 4) | symbol.kind
        shndx = 0 if not symbol.defined else 1
        value = 0 if not symbol.defined else 0x1000 + 16 * index
        name_at = strings.add(symbol.name)
        if wide:
            table += sym.pack(name_at, info, 0, shndx, value, 16 if symbol.defined else 0)
        else:
            table += sym.pack(name_at, value, 16 if symbol.defined else 0, info, 0, shndx)
        if symbol.defined:
            slot = def_index[symbol.version] if symbol.version else 1
            slot |= 0x8000 if symbol.hidden else 0
        elif symbol.version and symbol.file:
            slot = need_index[(symbol.file, symbol.version)]
        else:
            slot = 0 if not symbol.defined else 1
        versym += struct.pack(o + "H", slot)
    count = len(symbols) + 1

    # version sections
    verdef = bytearray()
    all_defs = [(base_name, 1, 1)] + [(name, 0, def_index[name]) for name in def_names]
    for position, (name, vflags, index) in enumerate(all_defs):
        last = position == len(all_defs) - 1
        verdef += struct.pack(
            o + "HHHHIII", 1, vflags, index, 1, elf_hash(name.encode()), 20, 0 if last else 28
        )
        verdef += struct.pack(o + "II", strings.add(name), 0)
    verneed = bytearray()
    files = list(needs.items())
    for position, (file, wanted) in enumerate(files):
        last = position == len(files) - 1
        size = 16 + 16 * len(wanted)
        verneed += struct.pack(
            o + "HHIII", 1, len(wanted), strings.add(file), 16, 0 if last else size
        )
        for slot, version in enumerate(wanted):
            verneed += struct.pack(
                o + "IHHII",
                elf_hash(version.encode()),
                2 if version in weak_needs else 0,
                need_index[(file, version)],
                strings.add(version),
                0 if slot == len(wanted) - 1 else 16,
            )

    # hash table
    first_defined = 1 + sum(1 for s in symbols if not s.defined)
    defined_syms = [s for s in symbols if s.defined]
    if hash_style == "gnu":
        word = "Q" if wide else "I"
        chains = [gnu_hash(s.name.encode()) & ~1 for s in defined_syms]
        if chains:
            chains[-1] |= 1
        symoffset = first_defined if gnu_symoffset is None else gnu_symoffset
        hashtab = struct.pack(o + "IIII", 1, symoffset, 1, 6)
        hashtab += struct.pack(o + word, (1 << (64 if wide else 32)) - 1)
        hashtab += struct.pack(o + "I", first_defined if defined_syms else 0)
        hashtab += b"".join(struct.pack(o + "I", value) for value in chains)
    elif hash_style == "sysv":
        hashtab = struct.pack(o + "II", 1, count) + struct.pack(o + "I", 1 if count > 1 else 0)
        hashtab += b"".join(
            struct.pack(o + "I", (i + 1) if 0 < i < count - 1 else 0) for i in range(count)
        )
    else:
        hashtab = b""

    # assemble: header, program headers, blobs
    ehsize = 64 if wide else 52
    phsize = 56 if wide else 32
    phnum = 2 + (interpreter is not None) + (tls_size > 0) + (exec_stack is not None)
    phnum += int(dynstr_segment) + int(code is not None)
    out = bytearray(ehsize + phsize * phnum)
    blobs: list[_Blob] = []

    def place(blob: _Blob) -> _Blob:
        while len(out) % blob.align:
            out.append(0)
        blob.offset = len(out)
        out.extend(blob.data)
        blobs.append(blob)
        return blob

    interp = place(_Blob(".interp", interpreter.encode() + b"\0", 1, 1)) if interpreter else None
    dynsym = place(_Blob(".dynsym", bytes(table), 11, 8, ".dynstr", 1, sym.size))
    gnu = (
        place(
            _Blob(
                ".gnu.hash" if hash_style == "gnu" else ".hash",
                hashtab,
                0x6FFFFFF6 if hash_style == "gnu" else 5,
                8,
                ".dynsym",
            )
        )
        if hashtab
        else None
    )
    vsym = place(_Blob(".gnu.version", bytes(versym), 0x6FFFFFFF, 2, ".dynsym", 0, 2))
    vdef = (
        place(_Blob(".gnu.version_d", bytes(verdef), 0x6FFFFFFD, 4, ".dynstr", len(all_defs)))
        if version_definitions
        else None
    )
    vneed = (
        place(_Blob(".gnu.version_r", bytes(verneed), 0x6FFFFFFE, 4, ".dynstr", len(files)))
        if files
        else None
    )
    tdata = place(_Blob(".tdata", b"\0" * tls_size, 1, 8, flags=0x403)) if tls_size else None
    text = place(_Blob(".text", code, 1, 16, flags=6)) if code is not None else None

    # .dynstr: in the main segment, or in a second one at a distant address
    dynstr_bytes = bytes(strings.data)
    dyn_entries: list[tuple[int, int]] = [(DT_NEEDED, at) for at in needed_at]
    for tag, value in ((DT_SONAME, soname_at), (DT_RPATH, rpath_at), (DT_RUNPATH, runpath_at)):
        if value is not None:
            dyn_entries.append((tag, value))
    dyn = struct.Struct(o + ("qQ" if wide else "iI"))
    entry_count = len(dyn_entries) + 12 + len(extra_dynamic)
    dynamic_size = dyn.size * (entry_count + 1)
    dynamic = place(_Blob(".dynamic", b"\0" * dynamic_size, 6, 8, ".dynstr", 0, dyn.size, flags=3))
    fat = place(_Blob(".nv_fatbin", fatbin, 1, 8)) if fatbin is not None else None
    if rodata is not None:
        place(_Blob(".rodata", rodata, 1, 8))
    shift = 0x200000 if dynstr_segment else 0
    dynstr = place(_Blob(".dynstr", dynstr_bytes, 3, 1))
    main_end = dynstr.offset if dynstr_segment else len(out)
    address = {b.name: b.offset + (shift if b is dynstr else 0) for b in blobs}

    dyn_entries += [
        (DT_STRTAB, address[".dynstr"]),
        (DT_STRSZ, len(dynstr_bytes)),
        (DT_SYMTAB, dynsym.offset),
        (DT_SYMENT, sym.size),
        (DT_VERSYM, vsym.offset),
    ]
    if vdef is not None:
        dyn_entries += [(DT_VERDEF, vdef.offset), (DT_VERDEFNUM, len(all_defs))]
    if gnu is not None:
        dyn_entries.append((DT_GNU_HASH if hash_style == "gnu" else DT_HASH, gnu.offset))
    if vneed is not None:
        dyn_entries += [(DT_VERNEED, vneed.offset), (DT_VERNEEDNUM, len(files))]
    if flags:
        dyn_entries.append((DT_FLAGS, flags))
    if flags_1:
        dyn_entries.append((DT_FLAGS_1, flags_1))
    dyn_entries += list(extra_dynamic)
    raw_dynamic = b"".join(dyn.pack(tag, value) for tag, value in dyn_entries)
    raw_dynamic += b"\0" * (dynamic_size - len(raw_dynamic))
    out[dynamic.offset : dynamic.offset + dynamic_size] = raw_dynamic

    # section headers
    shstr = _Strings()
    names = {blob.name: shstr.add(blob.name) for blob in blobs}
    shstrtab_name = shstr.add(".shstrtab")
    shstrtab = place(_Blob(".shstrtab", b"", 3, 1, flags=0))
    shstrtab_data = bytes(shstr.data)
    out.extend(shstrtab_data)
    order = [b for b in blobs if b is not shstrtab]
    index_of = {blob.name: position + 1 for position, blob in enumerate(order)}
    shdr = struct.Struct(o + ("IIQQQQIIQQ" if wide else "10I"))
    while len(out) % 8:
        out.append(0)
    shoff = len(out)
    headers = bytearray(shdr.size)
    for blob in order:
        link = index_of.get(blob.link, 0) if blob.link else 0
        headers += shdr.pack(
            names[blob.name],
            blob.kind,
            blob.flags,
            address[blob.name],
            blob.offset,
            len(blob.data),
            link,
            blob.info,
            blob.align,
            blob.entsize,
        )
    headers += shdr.pack(shstrtab_name, 3, 0, 0, shstrtab.offset, len(shstrtab_data), 0, 0, 1, 0)
    out.extend(headers)
    shnum = len(order) + 2

    # program headers
    phdr = struct.Struct(o + ("IIQQQQQQ" if wide else "8I"))

    def segment(p_type: int, p_flags: int, offset: int, vaddr: int, size: int, align: int) -> bytes:
        if wide:
            return phdr.pack(p_type, p_flags, offset, vaddr, vaddr, size, size, align)
        return phdr.pack(p_type, offset, vaddr, vaddr, size, size, p_flags, align)

    headers_out = [segment(1, 6, 0, 0, main_end, 0x1000)]
    if text is not None:
        headers_out.append(segment(1, 5, text.offset, text.offset, len(text.data), 16))
    if dynstr_segment:
        headers_out.append(
            segment(1, 4, dynstr.offset, address[".dynstr"], len(dynstr_bytes), 0x1000)
        )
    headers_out.append(segment(2, 6, dynamic.offset, dynamic.offset, dynamic_size, 8))
    if interp is not None:
        headers_out.insert(0, segment(3, 4, interp.offset, interp.offset, len(interp.data), 1))
    if tdata is not None:
        headers_out.append(segment(7, 4, tdata.offset, tdata.offset, tls_size, 8))
    if exec_stack is not None:
        headers_out.append(segment(0x6474E551, 6 | (1 if exec_stack else 0), 0, 0, 0, 16))
    out[ehsize : ehsize + phsize * phnum] = b"".join(headers_out)

    ident = b"\x7fELF" + bytes([2 if wide else 1, 1 if little else 2, 1, 0]) + b"\0" * 8
    header = struct.pack(
        o + "HHI" + addr * 3 + "IHHHHHH",
        elf_type,
        machine,
        1,
        0,
        ehsize,
        shoff if section_headers else 0,
        0,
        ehsize,
        phsize,
        phnum,
        shdr.size if section_headers else 0,
        shnum if section_headers else 0,
        shnum - 1 if section_headers else 0,
    )
    out[: len(ident) + len(header)] = ident + header
    if fat is not None:
        assert bytes(out[fat.offset : fat.offset + len(fatbin or b"")]) == fatbin
    return bytes(out)


def region(data: bytes, section: str) -> tuple[int, int]:
    """(offset, size) of a section of a built image, by its section header."""
    from torchguard._binary.elf.layout import Layout

    for name, _kind, offset, size in Layout(data).sections() or ():
        if name == section:
            return offset, size
    raise KeyError(section)

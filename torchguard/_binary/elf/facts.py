"""The loader-level facts of an ELF shared object: what ld.so reads before any symbol.

The dynamic section (NEEDED, SONAME, RPATH, RUNPATH, FLAGS, FLAGS_1), the version needs
(``.gnu.version_r``) and definitions (``.gnu.version_d``), the interpreter, the TLS and stack
segments, and where ``.nv_fatbin`` lies. Single-valued tags follow ld.so: the last entry of
a tag wins (``elf_get_dynamic_info`` overwrites), and DT_NEEDED keeps file order. Version
chains are walked as glibc's ``dl-version.c`` walks them (``vn_next``/``vna_next`` until 0),
bounded by the declared counts and hard caps.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import torchguard._binary.elf.constants as c
from torchguard._binary.elf.layout import (
    MAX_DYNAMIC,
    MAX_VERSIONS,
    ElfReadError,
    Layout,
    Segment,
    decode,
)

_VERNEED = struct.Struct("HHIII")  # vn_version, vn_cnt, vn_file, vn_aux, vn_next
_VERNAUX = struct.Struct("IHHII")  # vna_hash, vna_flags, vna_other, vna_name, vna_next
_VERDEF = struct.Struct("HHHHIII")  # vd_version, vd_flags, vd_ndx, vd_cnt, vd_hash, aux, next
_VERDAUX = struct.Struct("II")  # vda_name, vda_next


@dataclass(frozen=True)
class VersionNeed:
    """One required version: ``name`` (``GLIBCXX_3.4.30``) from the object ``file`` names."""

    file: str
    name: str
    index: int
    """The ``.gnu.version`` index undefined symbols use to refer to this version."""
    hash: int
    weak: bool
    """VER_FLG_WEAK: ld.so does not fail when this version is missing."""


@dataclass(frozen=True)
class VersionDef:
    """One defined version node: ``name`` at ``index``, the base node (the soname) or not."""

    name: str
    index: int
    hash: int
    base: bool
    weak: bool
    parents: tuple[str, ...] = ()


@dataclass(frozen=True)
class ElfFacts:
    """What the Linux loader model needs to know about one ELF file, without its symbols."""

    elf_class: int
    """32 or 64."""
    little_endian: bool
    machine: int
    """``e_machine`` (:data:`~.constants.EM_X86_64` ...)."""
    osabi: int
    type: int
    """``e_type``: ET_DYN for shared objects and PIE executables, ET_EXEC otherwise."""
    interpreter: str | None
    soname: str | None
    needed: tuple[str, ...]
    rpath: str | None
    """The raw DT_RPATH string (``$ORIGIN/../lib:$ORIGIN``), or None."""
    runpath: str | None
    flags: int
    """DT_FLAGS (DF_*)."""
    flags_1: int
    """DT_FLAGS_1 (DF_1_*)."""
    verneed: tuple[VersionNeed, ...]
    verdef: tuple[VersionDef, ...]
    tls_size: int
    """PT_TLS's memory size: the static TLS block the object needs (0 without PT_TLS)."""
    tls_align: int
    exec_stack: bool | None
    """PT_GNU_STACK asks for an executable stack; None without PT_GNU_STACK."""
    fatbin: tuple[int, int] | None
    """(file offset, size) of ``.nv_fatbin``; None without it or without section headers."""
    segments: tuple[Segment, ...] = ()

    @property
    def bits(self) -> int:
        return 64 if self.elf_class == c.ELFCLASS64 else 32

    @property
    def machine_name(self) -> str:
        return c.machine_name(self.machine)

    @property
    def rpath_entries(self) -> tuple[str, ...]:
        return split_search_path(self.rpath)

    @property
    def runpath_entries(self) -> tuple[str, ...]:
        return split_search_path(self.runpath)

    @property
    def nodelete(self) -> bool:
        return bool(self.flags_1 & c.DF_1_NODELETE)

    @property
    def bind_now(self) -> bool:
        return bool(self.flags & c.DF_BIND_NOW or self.flags_1 & c.DF_1_NOW)

    @property
    def global_(self) -> bool:
        """DF_1_GLOBAL: the object joins the global scope however it is opened."""
        return bool(self.flags_1 & c.DF_1_GLOBAL)

    @property
    def nodeflib(self) -> bool:
        """DF_1_NODEFLIB: the default directories are not searched for its dependencies."""
        return bool(self.flags_1 & c.DF_1_NODEFLIB)

    @property
    def static_tls(self) -> bool:
        return bool(self.flags & c.DF_STATIC_TLS)

    def provides(self, version: str) -> bool:
        """Whether the object defines the version node ``version`` (not counting its base)."""
        return any(node.name == version and not node.base for node in self.verdef)


def split_search_path(value: str | None) -> tuple[str, ...]:
    """The directories of an RPATH/RUNPATH/LD_LIBRARY_PATH value, in order.

    Separated by ``:`` (glibc also accepts ``;`` in these lists); an empty element means the
    current directory, as glibc's ``fillin_rpath`` reads it.
    """
    if not value:
        return ()
    return tuple(entry or "." for entry in value.replace(";", ":").split(":"))


def read_facts(layout: Layout) -> ElfFacts:
    dynamic = Dynamic(layout)
    tls = next((s for s in layout.segments if s.type == c.PT_TLS), None)
    stack = next((s for s in layout.segments if s.type == c.PT_GNU_STACK), None)
    return ElfFacts(
        elf_class=layout.elf_class,
        little_endian=layout.little,
        machine=layout.machine,
        osabi=layout.osabi,
        type=layout.type,
        interpreter=_interpreter(layout),
        soname=dynamic.text(c.DT_SONAME),
        needed=tuple(dynamic.string(value, "DT_NEEDED") for value in dynamic.needed),
        rpath=dynamic.text(c.DT_RPATH),
        runpath=dynamic.text(c.DT_RUNPATH),
        flags=dynamic.tags.get(c.DT_FLAGS, 0),
        flags_1=dynamic.tags.get(c.DT_FLAGS_1, 0),
        verneed=dynamic.version_needs(),
        verdef=dynamic.version_defs(),
        tls_size=tls.memsz if tls else 0,
        tls_align=tls.align if tls else 0,
        exec_stack=bool(stack.flags & c.PF_X) if stack else None,
        fatbin=fatbin_range(layout),
        segments=layout.segments,
    )


class Dynamic:
    """The dynamic section's tags (the last of each wins), DT_NEEDED in order, and .dynstr."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.tags: dict[int, int] = {}
        self.needed: list[int] = []
        self.strtab = self.strend = 0
        self.strings: dict[int, str] = {}
        self.budget = 2 * layout.size + (1 << 20)
        found = [s for s in layout.segments if s.type == c.PT_DYNAMIC]
        if not found:
            return  # a static executable or a plain object: nothing dynamic to read
        segment = found[0]
        count = min(segment.filesz // layout.dyn.size, MAX_DYNAMIC)
        start = layout.offset(segment.vaddr, count * layout.dyn.size, "the dynamic section")
        for index in range(count):
            tag, value = layout.unpack(layout.dyn, start + index * layout.dyn.size, "DT entry")
            if tag == c.DT_NULL:
                break
            if tag == c.DT_NEEDED:
                self.needed.append(value)
            else:
                self.tags[tag] = value
        if c.DT_STRTAB in self.tags:
            self.strtab, end = layout.extent(self.tags[c.DT_STRTAB], "the string table")
            size = self.tags.get(c.DT_STRSZ)
            self.strend = end if size is None else min(end, self.strtab + size)
        elif self.needed or any(t in self.tags for t in _STRING_TAGS):
            raise ElfReadError("the dynamic section names strings but has no DT_STRTAB")

    def string(self, offset: int, what: str) -> str:
        """The .dynstr string at ``offset``, decoded once per offset.

        Decoded strings are shared between the entries naming them, and new ones are charged
        to a budget of twice the file's size: 30 k version entries naming distinct suffixes
        of one long string cannot cost gigabytes.
        """
        known = self.strings.get(offset)
        if known is not None:
            return known
        raw = self.layout.string(self.strtab + offset, self.strend, what)
        self.budget -= len(raw)
        if self.budget < 0:
            raise ElfReadError("the dynamic strings add up to far more than the file holds")
        text = self.strings[offset] = decode(raw)
        return text

    def text(self, tag: int) -> str | None:
        if tag not in self.tags:
            return None
        return self.string(self.tags[tag], _TAG_NAMES.get(tag, hex(tag)))

    def version_needs(self) -> tuple[VersionNeed, ...]:
        if c.DT_VERNEED not in self.tags:
            return ()
        layout = self.layout
        need = struct.Struct(layout.order + _VERNEED.format)
        aux = struct.Struct(layout.order + _VERNAUX.format)
        declared = self.tags.get(c.DT_VERNEEDNUM, MAX_VERSIONS)
        at = layout.offset(self.tags[c.DT_VERNEED], need.size, "the version needs")
        found: list[VersionNeed] = []
        for _ in range(min(declared, MAX_VERSIONS)):
            _version, count, file_at, aux_next, next_need = layout.unpack(need, at, "Verneed")
            file = self.string(file_at, "a version need's file")
            entry = at + aux_next
            for _ in range(count):
                if len(found) >= MAX_VERSIONS:
                    raise ElfReadError(f"more than {MAX_VERSIONS} version needs")
                hash_, flags, other, name_at, aux_step = layout.unpack(aux, entry, "Vernaux")
                name = self.string(name_at, "a needed version's name")
                found.append(VersionNeed(file, name, other, hash_, bool(flags & c.VER_FLG_WEAK)))
                if not aux_step:
                    break
                entry += aux_step
            if not next_need:
                break
            at += next_need
        return tuple(found)

    def version_defs(self) -> tuple[VersionDef, ...]:
        if c.DT_VERDEF not in self.tags:
            return ()
        layout = self.layout
        define = struct.Struct(layout.order + _VERDEF.format)
        aux = struct.Struct(layout.order + _VERDAUX.format)
        declared = self.tags.get(c.DT_VERDEFNUM, MAX_VERSIONS)
        at = layout.offset(self.tags[c.DT_VERDEF], define.size, "the version definitions")
        found: list[VersionDef] = []
        names = 0
        for _ in range(min(declared, MAX_VERSIONS)):
            _version, flags, index, count, hash_, aux_next, next_def = layout.unpack(
                define, at, "Verdef"
            )
            labels: list[str] = []
            entry = at + aux_next
            for _ in range(count):
                names += 1
                if names > MAX_VERSIONS:
                    raise ElfReadError(f"more than {MAX_VERSIONS} version definition names")
                name_at, aux_step = layout.unpack(aux, entry, "Verdaux")
                labels.append(self.string(name_at, "a version definition's name"))
                if not aux_step:
                    break
                entry += aux_step
            if not labels:
                raise ElfReadError(f"version definition {index} has no name")
            found.append(
                VersionDef(
                    labels[0],
                    index,
                    hash_,
                    bool(flags & c.VER_FLG_BASE),
                    bool(flags & c.VER_FLG_WEAK),
                    tuple(labels[1:]),
                )
            )
            if not next_def:
                break
            at += next_def
        return tuple(found)


_STRING_TAGS = (c.DT_SONAME, c.DT_RPATH, c.DT_RUNPATH, c.DT_VERNEED, c.DT_VERDEF)
_TAG_NAMES = {c.DT_SONAME: "DT_SONAME", c.DT_RPATH: "DT_RPATH", c.DT_RUNPATH: "DT_RUNPATH"}


def _interpreter(layout: Layout) -> str | None:
    for segment in layout.segments:
        if segment.type == c.PT_INTERP:
            end = segment.offset + segment.filesz
            if end > layout.size:
                raise ElfReadError("truncated: PT_INTERP lies past the end of the file")
            return decode(layout.string(segment.offset, end, "PT_INTERP"))
    return None


def fatbin_range(layout: Layout) -> tuple[int, int] | None:
    """(offset, size) of ``.nv_fatbin`` from the section headers; None without it.

    A section that claims bytes past the end of the file is a cut-short file: ElfReadError.
    """
    for name, kind, offset, size in layout.sections() or ():
        if name == c.NV_FATBIN and kind != c.SHT_NOBITS:
            if offset + size > layout.size:
                raise ElfReadError(
                    f"truncated: {c.NV_FATBIN} ends at byte {offset + size}, the file has "
                    f"{layout.size}"
                )
            return offset, size
    return None

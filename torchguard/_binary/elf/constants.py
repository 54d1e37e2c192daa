"""The ELF numbers torchguard reads: classes, byte orders, machines, tags and flags.

Values from the System V gABI and glibc's ``elf.h``; only the ones the reader, the loader
model and the rules need.
"""

from __future__ import annotations

MAGIC = b"\x7fELF"

# e_ident[EI_CLASS] and e_ident[EI_DATA]
ELFCLASS32 = 1
ELFCLASS64 = 2
ELFDATA2LSB = 1
ELFDATA2MSB = 2

# e_ident[EI_OSABI]: ld.so accepts SYSV and GNU (GNU_IFUNC/UNIQUE users are marked GNU).
ELFOSABI_SYSV = 0
ELFOSABI_GNU = 3

# e_type
ET_EXEC = 2
ET_DYN = 3

# e_machine
EM_386 = 3
EM_PPC64 = 21
EM_S390 = 22
EM_ARM = 40
EM_X86_64 = 62
EM_AARCH64 = 183
EM_RISCV = 243
EM_LOONGARCH = 258

MACHINE_NAMES: dict[int, str] = {
    EM_386: "i386",
    EM_PPC64: "ppc64",
    EM_S390: "s390",
    EM_ARM: "arm",
    EM_X86_64: "x86_64",
    EM_AARCH64: "aarch64",
    EM_RISCV: "riscv",
    EM_LOONGARCH: "loongarch",
}

# p_type
PT_LOAD = 1
PT_DYNAMIC = 2
PT_INTERP = 3
PT_TLS = 7
PT_GNU_STACK = 0x6474E551
PF_X = 1

# d_tag
DT_NULL = 0
DT_NEEDED = 1
DT_HASH = 4
DT_STRTAB = 5
DT_SYMTAB = 6
DT_STRSZ = 10
DT_SYMENT = 11
DT_SONAME = 14
DT_RPATH = 15
DT_FLAGS = 30
DT_RUNPATH = 29
DT_GNU_HASH = 0x6FFFFEF5
DT_VERSYM = 0x6FFFFFF0
DT_FLAGS_1 = 0x6FFFFFFB
DT_VERDEF = 0x6FFFFFFC
DT_VERDEFNUM = 0x6FFFFFFD
DT_VERNEED = 0x6FFFFFFE
DT_VERNEEDNUM = 0x6FFFFFFF

# DT_FLAGS
DF_ORIGIN = 0x1
DF_SYMBOLIC = 0x2
DF_BIND_NOW = 0x8
DF_STATIC_TLS = 0x10

# DT_FLAGS_1
DF_1_NOW = 0x1
DF_1_GLOBAL = 0x2
DF_1_NODELETE = 0x8
DF_1_NOOPEN = 0x40
DF_1_ORIGIN = 0x80
DF_1_NODEFLIB = 0x800
DF_1_PIE = 0x8000000

# Symbols: st_info's binding (high nibble) and type (low nibble), special section indexes.
STB_LOCAL = 0
STB_GLOBAL = 1
STB_WEAK = 2
STB_GNU_UNIQUE = 10
STT_NOTYPE = 0
STT_OBJECT = 1
STT_FUNC = 2
STT_COMMON = 5
STT_TLS = 6
STT_GNU_IFUNC = 10
SHN_UNDEF = 0
SHN_XINDEX = 0xFFFF
PN_XNUM = 0xFFFF

# Symbol versions: .gnu.version indexes and the flags of Verdef/Vernaux entries.
VER_NDX_LOCAL = 0
VER_NDX_GLOBAL = 1
VERSYM_HIDDEN = 0x8000
VER_FLG_BASE = 0x1
VER_FLG_WEAK = 0x2

# Section types
SHT_NOBITS = 8
SHT_DYNSYM = 11

#: The section NVIDIA's toolchain puts fatbin containers in (``.nv_fatb`` on Windows).
NV_FATBIN = ".nv_fatbin"


def machine_name(machine: int) -> str:
    """``x86_64`` for EM_X86_64; a hex number for machines torchguard has no name for."""
    return MACHINE_NAMES.get(machine, hex(machine))

"""Manylinux wheels read in place: their shared objects are streamed from the zip, never unpacked.

The ld.so model walks a site-packages folder by name (RPATH joins, globs, ``os.stat``), so the
wheels' layout is mirrored in a scratch folder as pip would install it, but holding no
binary's bytes: each shared-object member becomes an empty *sparse* file of the member's size
(a name and an inode; no data is written, no disk is used), and only the few text files the
analysis reads (a dist-info's ``METADATA``, ``RECORD``, ``WHEEL``, ``INSTALLER`` and
``top_level.txt``; a package's ``__init__.py`` and ``version.py``) are written, within a
budget the wheels' own size sets (:func:`text_budget`). :class:`WheelFiles` answers for
those placeholders from the zip: ELF facts and symbols are read from the member's stream
(:func:`~torchguard._binary.elf.read_elf_stream`, bounded by
:func:`~torchguard._binary.budget.inflate_budget`), and everything is keyed by the member's
content (its name in the wheel, CRC-32 and size), so a rescan of the same wheel, from any
scratch folder, reads nothing. A member is written into its placeholder (streamed, then mapped
like an installed file, so memory holds only the pages read) only when a reader needs more
than the streamed parts: a table outside them (``NotKept``; no member of torch 2.9.1 or of
its 15 NVIDIA wheels) and cuDNN's ``dlopen`` names. ``.nv_fatbin`` is parsed from the stream.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from torchguard._binary.budget import INFLATE_RATIO, inflate_budget, mib, over_budget
from torchguard._binary.elf import (
    ElfImage,
    ElfReadError,
    ElfUnreadable,
    NotKept,
    read_elf_file,
    read_elf_stream,
)
from torchguard._binary.fatbin import FatbinArchs, parse_fatbin_stream
from torchguard._binary.stream import CHUNK
from torchguard._platforms.linux.files import (
    ElfRejected,
    FactsStore,
    LoadFacts,
    PosixFiles,
    SymbolTable,
    load_facts,
    symbol_table,
    verdict_words,
)
from torchguard._platforms.linux.verify import Verdict, verify

_ZIP_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError)
#: A text member the analysis reads is never this large in a real wheel (torch's
#: ``__init__.py`` is 0.1 MB, its RECORD 2 MB): larger is refused, never written to disk.
TEXT_LIMIT = 64 << 20
#: All the text members of a wheel set may write this much however small they are (torch
#: 2.9.1's: 2.3 MB) ...
TEXT_FLOOR = 8 << 20
#: The dist-info files the analysis reads (pins, versions, who installed a file).
_DIST_INFO_READ = frozenset({"METADATA", "RECORD", "WHEEL", "INSTALLER", "top_level.txt"})
#: The modules of a package the analysis reads: torch's load sequence and its version.
_MODULES_READ = frozenset({"__init__.py", "version.py"})


@dataclass(frozen=True)
class Member:
    """One wheel member that the layout mirrors."""

    wheel: str
    name: str
    size: int
    compressed: int
    crc: int

    @property
    def key(self) -> str:
        """Its content, wherever the wheel or the scratch folder lies."""
        return f"wheel-member|{self.name}|{self.crc:08x}|{self.size}"


@dataclass
class WheelLayout:
    """A scratch site-packages mirroring wheels: placeholder identity -> its member."""

    site: str
    key: str = ""
    """The wheels' content (every member's name, CRC and size), for per-site caches."""
    members: dict[tuple[int, int], Member] = field(default_factory=dict)


def is_shared_object(name: str) -> bool:
    """A member ld.so could find by name: ``*.so`` or ``*.so.<version>``."""
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


def _read_as_text(parts: list[str]) -> bool:
    """Members the analysis reads as text (nothing else is written): a dist-info's metadata,
    a top-level package's ``__init__.py`` and ``version.py``."""
    if len(parts) != 2:
        return False
    if parts[0].endswith(".dist-info"):
        return parts[1] in _DIST_INFO_READ
    return parts[1] in _MODULES_READ


def text_budget(compressed: int) -> int:
    """The bytes text members taking ``compressed`` bytes in their wheels may write: text
    deflates a few fold, a deflate bomb a thousandfold (300 KB of wheel, 300 MiB of text)."""
    return min(TEXT_LIMIT, max(TEXT_FLOOR, INFLATE_RATIO * compressed))


def _check_text_budget(wheels: list[str]) -> None:
    """Refuse, before anything is written, text members the wheels' size does not allow."""
    claimed = compressed = 0
    largest = ("", "", 0)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                parts = placed(info.filename)
                if parts is None or info.is_dir() or not _read_as_text(parts):
                    continue
                if info.file_size > TEXT_LIMIT:
                    raise OSError(
                        errno.EFBIG,
                        f"{wheel}: {info.filename} claims {info.file_size} bytes, more than "
                        "any wheel's metadata or module",
                    )
                claimed += info.file_size
                compressed += info.compress_size
                if info.file_size > largest[2]:
                    largest = (wheel, info.filename, info.file_size)
    budget = text_budget(compressed)
    if claimed > budget:
        wheel, name, size = largest
        raise OSError(
            errno.EFBIG,
            f"the wheels' metadata would take {mib(claimed)} on disk, more than the "
            f"{mib(budget)} their size in the archives allows (a deflate bomb, not a build's "
            f"metadata; the largest: {wheel}: {name}, {mib(size)})",
        )


def placed(name: str) -> list[str] | None:
    """Where pip puts a wheel member, as path parts (None: not installed, or unsafe)."""
    parts = name.split("/")
    if any(p in ("..", ".", "") for p in parts) or name.startswith("/"):
        return None
    if len(parts) > 2 and parts[0].endswith(".data"):
        return parts[2:] if parts[1] in ("purelib", "platlib") else None
    return parts


def lay_out_wheels(wheels: list[str], site: str) -> WheelLayout:
    """Mirror ``wheels`` into ``site`` (an empty folder the caller owns and removes).

    Raises ``OSError`` or ``zipfile.BadZipFile`` for a wheel that cannot be read."""
    _check_text_budget(wheels)
    layout = WheelLayout(site)
    digest = hashlib.sha256()
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                parts = placed(info.filename)
                if parts is None or info.is_dir():
                    continue
                digest.update(f"{info.filename}|{info.CRC}|{info.file_size}\n".encode())
                shared = is_shared_object(info.filename)
                if not shared and not _read_as_text(parts):
                    continue
                target = os.path.join(site, *parts)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as sink:
                    if shared:
                        sink.truncate(info.file_size)  # sparse: a size, no data
                    else:
                        with archive.open(info) as source:
                            shutil.copyfileobj(source, sink, 1 << 20)
                status = os.stat(target)
                layout.members[(status.st_dev, status.st_ino)] = Member(
                    wheel, info.filename, info.file_size, info.compress_size, info.CRC
                )
    layout.key = digest.hexdigest()
    return layout


class WheelFiles(PosixFiles):
    """:class:`PosixFiles` whose placeholders are read from their wheel members."""

    def __init__(
        self,
        layout: WheelLayout,
        store: FactsStore | None = None,
        elf_class: int = 2,
        machine: int = 62,
    ) -> None:
        super().__init__(store, elf_class, machine)
        self.layout = layout
        self._archives: dict[str, zipfile.ZipFile] = {}
        self._materialised: set[str] = set()

    def member(self, path: str) -> Member | None:
        return self.layout.members.get(self.identity(path))

    def fingerprint(self, path: str) -> str:
        member = self.member(path)
        return member.key if member is not None else super().fingerprint(path)

    def facts(self, path: str) -> LoadFacts:
        member = self.member(path)
        if member is None:
            return super().facts(path)
        key = self.identity(path)
        found = self._facts.get(key)
        if found is not None:
            return found
        if self._store is not None:
            found = self._store.facts(member.key)
        if found is None:
            image = self._image(member, path, symbols=True)
            found = load_facts(image.facts)
            verdict = self._verdict(member)
            if verdict is not None and verdict.reject and not verdict.foreign:
                raise ElfRejected(verdict.reject)  # read, yet glibc's checks refuse it
            if image.symbols is not None:
                self._symbols[key] = symbol_table(image.symbols)
            if self._store is not None:
                self._store.store_facts(member.key, found)
        self._facts[key] = found
        return found

    def symbols(self, path: str) -> SymbolTable:
        member = self.member(path)
        if member is None:
            return super().symbols(path)
        key = self.identity(path)
        found = self._symbols.get(key)
        if found is None:
            image = self._image(member, path, symbols=True)
            assert image.symbols is not None
            found = self._symbols[key] = symbol_table(image.symbols)
        return found

    def whole(self, path: str) -> str:
        self._materialise(path)
        return path

    def fatbin(self, path: str, read: Callable[[str], FatbinArchs | None]) -> FatbinArchs | None:
        """``.nv_fatbin`` read from the member's stream, headers only (never written out:
        torch 2.9.1's is 915 MiB); ``read`` serves a file that is no member."""
        member = self.member(path)
        if member is None:
            return read(path)
        span = self._image(member, path, symbols=False).facts.fatbin
        if span is None:
            return None
        offset, size = span
        try:
            with self._archive(member.wheel).open(member.name) as stream:
                skipped = 0
                while skipped < offset:  # read past what precedes the section, 1 MiB at a time
                    chunk = stream.read(min(CHUNK, offset - skipped))
                    if not chunk:
                        raise ElfReadError(f"truncated: the data ends at {skipped} of {offset}")
                    skipped += len(chunk)
                return parse_fatbin_stream(stream, size)
        except _ZIP_DAMAGE as exc:
            raise ElfReadError(f"damaged in its wheel {member.wheel}: {exc}") from None
        except OSError as exc:
            raise ElfUnreadable.from_error(exc) from None

    def close(self) -> None:
        for archive in self._archives.values():
            archive.close()
        self._archives.clear()

    def _archive(self, wheel: str) -> zipfile.ZipFile:
        found = self._archives.get(wheel)
        if found is None:
            found = self._archives[wheel] = zipfile.ZipFile(wheel)
        return found

    def _image(self, member: Member, path: str, *, symbols: bool) -> ElfImage:
        """The member read from its stream, keeping only what its tables live in; the whole
        member when a table lies elsewhere (within its budget either way)."""
        self.reads += 1
        budget = inflate_budget(member.compressed)
        try:
            try:
                with self._archive(member.wheel).open(member.name) as stream:
                    return read_elf_stream(stream, member.size, symbols=symbols, budget=budget)
            except NotKept:
                # a table outside the kept parts (rare): the member is written into its
                # placeholder, streamed, and mapped like an installed file, so memory holds
                # only the pages the tables touch, never the whole member
                if member.size > budget:
                    raise ElfUnreadable(over_budget(member.size, member.size, budget)) from None
                self._materialise(path)
                return read_elf_file(path, symbols=symbols)
        except ElfUnreadable:
            raise
        except ElfReadError as error:
            raise verdict_words(self._verdict(member), error) from None
        except _ZIP_DAMAGE as exc:
            raise ElfReadError(f"damaged in its wheel {member.wheel}: {exc}") from None
        except (OSError, MemoryError) as exc:
            raise ElfUnreadable.from_error(exc) from None

    def _verdict(self, member: Member) -> Verdict | None:
        """glibc's own checks of the member (its header and program headers), as
        ``verify_file`` makes them of a file; None when it cannot be read now."""
        try:
            with self._archive(member.wheel).open(member.name) as stream:
                head = stream.read(min(member.size, 1 << 16))
        except (*_ZIP_DAMAGE, OSError):
            return None
        if len(head) >= 64 and head[:4] == b"\x7fELF" and head[4] == 2:
            phoff = struct.unpack_from("<Q", head, 32)[0]
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            end = phoff + phentsize * phnum
            if phoff >= 64 and end > len(head):
                return None  # program headers past the first 64 KiB: not judged
            head = head[:end] if phoff >= 64 else head[:64]
        return verify(head, member.size, self._class, self._machine)

    def _materialise(self, path: str) -> None:
        """Write the member's bytes into its placeholder, streamed, for a reader that maps
        the whole file (cuDNN's dlopen names, ``.nv_fatbin``): only members asked for."""
        member = self.member(path)
        if member is None or path in self._materialised:
            return
        self._materialised.add(path)
        try:
            with self._archive(member.wheel).open(member.name) as source, open(path, "r+b") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
        except _ZIP_DAMAGE as exc:
            raise ElfReadError(f"damaged in its wheel {member.wheel}: {exc}") from None
        except OSError as exc:
            raise ElfUnreadable.from_error(exc) from None

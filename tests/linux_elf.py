"""Small ELF64 shared objects on disk, for the ld.so model's unit tests.

A thin layer over :func:`elf_builder.build_elf` in the shape those tests speak: a defined
``name@VERSION`` is the default version ``VERSION`` (listed in ``verdef``); an undefined
``name@VERSION`` is needed from the file ``verneed`` maps to ``VERSION``. Without ``verdef``
the object defines no versions at all (glibc then only warns about a missing one).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from elf_builder import EM_AARCH64, EM_X86_64, build_elf

__all__ = ["EM_AARCH64", "EM_X86_64", "build_so", "write_so"]


def build_so(
    soname: str | None = None,
    *,
    needed: Sequence[str] = (),
    rpath: str | None = None,
    runpath: str | None = None,
    defines: Sequence[str] = (),
    undefined: Sequence[str] = (),
    verdef: Sequence[str] = (),
    verneed: dict[str, Sequence[str]] | None = None,
    machine: int = EM_X86_64,
) -> bytes:
    """A shared object. Symbols are ``name`` or ``name@VERSION``; a defined ``name@VERSION``
    needs ``VERSION`` in ``verdef``, an undefined one needs it in ``verneed``."""
    needed_from = {v: file for file, versions in (verneed or {}).items() for v in versions}
    references: list[str | tuple[str, str, str]] = []
    for entry in undefined:
        name, _, version = entry.partition("@")
        references.append((name, version, needed_from[version]) if version else name)
    return build_elf(
        needed,
        soname=soname,
        rpath=rpath,
        runpath=runpath,
        defined=[d.replace("@", "@@", 1) for d in defines],
        undefined=references,
        versions=verdef,
        version_definitions=bool(verdef),
        machine=machine,
    )


def write_so(folder: Path, name: str, **kwargs: object) -> Path:
    """``build_so(**kwargs)`` written to ``folder/name`` (soname defaults to ``name``)."""
    folder.mkdir(parents=True, exist_ok=True)
    kwargs.setdefault("soname", name)
    path = folder / name
    path.write_bytes(build_so(**kwargs))  # type: ignore[arg-type]
    return path

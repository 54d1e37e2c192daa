"""How the Windows loader binds symbols, as public sources show it, against our model.

ReactOS's loaders (``ldrpe.c``'s LdrpSnapIAT, the NT6 ``LdrpParseForwarderDescription`` and
``LdrpResolveProcedureAddress``) and Wine's ``dlls/ntdll/loader.c`` agree on:

- an imported name is compared byte for byte (``strcmp``): case matters;
- a forwarder ``MODULE.Name`` is split at its LAST dot; ``.dll`` is added to the module part
  only when that part has no extension (``LdrpIsExtensionPresent``); ``MODULE.#12`` names an
  ordinal; a forwarder with no dot is STATUS_INVALID_IMAGE_FORMAT;
- a chain of more than 32 forwarders is STATUS_INVALID_IMAGE_FORMAT;
- binding to a DLL that has no export directory at all is STATUS_INVALID_IMAGE_FORMAT
  (WinError 193), before any name is looked up.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pefile
from fakes import KERNEL, FakeTorch
from pe_builder import build_pe
from test_symbols import LIB, model

import torchguard
from torchguard._binary.pe.symbols import read_symbols
from torchguard._platforms.windows.loader import SYMBOL


def top(*symbols: str | int) -> bytes:
    return build_pe(["c10.dll"], symbols={"c10.dll": list(symbols)})


def test_names_are_case_sensitive() -> None:
    result = model(
        {f"{LIB}\\top.dll": top("Alloc"), f"{LIB}\\c10.dll": build_pe(exports=["alloc"])}
    ).load(f"{LIB}\\top.dll")
    assert result.winerror == 127
    assert result.failures[0].gap is not None and result.failures[0].gap.missing == ("Alloc",)


def test_a_forwarder_is_split_at_its_last_dot() -> None:
    """``sub.mod.g``: the module is ``sub.mod`` (it has an extension: no ``.dll`` added)."""
    files = {
        f"{LIB}\\top.dll": top("f"),
        f"{LIB}\\c10.dll": build_pe(exports=[], forwarders={"f": "sub.mod.g"}),
        f"{LIB}\\sub.mod": build_pe(exports=["g"]),
    }
    assert model(files).load(f"{LIB}\\top.dll").ok
    files[f"{LIB}\\sub.mod"] = build_pe(exports=["mod.g"])
    result = model(files).load(f"{LIB}\\top.dll")
    assert result.winerror == 127 and result.failures[0].leaf == "c10.dll"


def test_an_ordinal_forwarder() -> None:
    files = {
        f"{LIB}\\top.dll": top("f"),
        f"{LIB}\\c10.dll": build_pe(exports=[], forwarders={"f": "last.#3"}),
        f"{LIB}\\last.dll": build_pe(exports=["a", "b", "c"]),  # ordinals 1-3
    }
    assert model(files).load(f"{LIB}\\top.dll").ok
    files[f"{LIB}\\last.dll"] = build_pe(exports=["a", "b"])
    assert model(files).load(f"{LIB}\\top.dll").winerror == 127


def test_a_forwarder_without_a_dot_is_a_bad_image() -> None:
    files = {
        f"{LIB}\\top.dll": top("f"),
        f"{LIB}\\c10.dll": build_pe(exports=[], forwarders={"f": "nodot"}),
        f"{LIB}\\nodot.dll": build_pe(exports=["nodot"]),
    }
    result = model(files).load(f"{LIB}\\top.dll")
    (failure,) = result.failures
    assert failure.kind == SYMBOL and failure.gap is not None
    assert result.winerror == 193 and failure.gap.forward_missing is None


def test_a_forwarder_loop_is_a_bad_image() -> None:
    """c10!f -> loop!g -> c10!f ...: the loader gives up after 32 hops."""
    files = {
        f"{LIB}\\top.dll": top("f"),
        f"{LIB}\\c10.dll": build_pe(exports=[], forwarders={"f": "loop.g"}),
        f"{LIB}\\loop.dll": build_pe(exports=[], forwarders={"g": "c10.f"}),
    }
    result = model(files).load(f"{LIB}\\top.dll")
    assert not result.ok and result.winerror == 193


def test_binding_to_a_dll_without_an_export_table_is_a_bad_image() -> None:
    """LdrpSnapIAT refuses an exporter with no export directory: 193, not 127 or 182."""
    files = {
        f"{LIB}\\top.dll": top("kept", 5),
        f"{LIB}\\c10.dll": build_pe(exports=[]),
    }
    result = model(files).load(f"{LIB}\\top.dll")
    (failure,) = result.failures
    assert failure.gap is not None and failure.gap.count == 2
    assert result.winerror == 193
    # an export table that lacks the names is still a plain missing name
    files[f"{LIB}\\c10.dll"] = build_pe(exports=["other"])
    assert model(files).load(f"{LIB}\\top.dll").winerror == 127


def test_the_finding_says_why_the_loader_refuses(tmp_path: Path, runtime_dir: Path) -> None:
    """c10.dll replaced by a DLL with no export table: WinError 193, and the reason."""
    site = FakeTorch().write(tmp_path / "site")
    (site / "torch" / "lib" / "c10.dll").write_bytes(build_pe(KERNEL, exports=[]))
    report = torchguard.scan([site], system32=[runtime_dir])
    errors = [f for f in report.errors if f.code == "missing-symbol"]
    assert errors and all("it has no export table" in f.message for f in errors)
    assert all("WinError 193" in f.message for f in errors)
    assert report.import_torch is not None and report.import_torch.winerror == 193


def _descriptor_offset(image: bytes, directory: int) -> int:
    pe = pefile.PE(data=image, fast_load=True)
    return int(pe.get_offset_from_rva(pe.OPTIONAL_HEADER.DATA_DIRECTORY[directory].VirtualAddress))


def test_the_import_walk_stops_at_a_descriptor_without_a_name_or_thunks() -> None:
    """LdrpHandleImportTable walks ``while (Name && FirstThunk)``: a half-empty descriptor
    ends the table, and nothing after it is bound."""
    image = bytearray(build_pe(["a.dll", "b.dll", "c.dll"]))
    second = _descriptor_offset(bytes(image), 1) + 20
    struct.pack_into("<I", image, second + 16, 0)  # b.dll's FirstThunk
    tables = read_symbols(bytes(image))
    assert list(tables.imports) == ["a.dll"]


def test_a_damaged_delay_import_table_does_not_fail_the_load() -> None:
    """No load reads delay-import tables: their damage is no corrupt DLL (WinError 193)."""
    image = bytearray(build_pe(["c10.dll"], ["late.dll", "later.dll"]))
    delay = _descriptor_offset(bytes(image), 13)
    struct.pack_into("<I", image, delay + 32 + 16, 0x7FFFFFF0)  # later.dll's lookup table
    tables = read_symbols(bytes(image))
    assert list(tables.delay_imports) == ["late.dll"]
    loader = model(
        {f"{LIB}\\top.dll": bytes(image), f"{LIB}\\c10.dll": build_pe()},
        system=("kernel32.dll", "late.dll", "later.dll"),
    )
    assert loader.load(f"{LIB}\\top.dll").failures == []

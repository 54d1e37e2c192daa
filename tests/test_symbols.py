"""Symbol level: the reader, every binding judged (WinError 127/182), forwarders, the cache."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import pefile
import pytest
from fakes import KERNEL, FakeTorch
from pe_builder import DEFAULT_SYMBOL, I386, build_pe

import torchguard
from torchguard._binary.demangle import qualified_name, readable
from torchguard._binary.pe.errors import PEReadError
from torchguard._binary.pe.image import read_image
from torchguard._binary.pe.symbols import read_symbols
from torchguard._platforms.windows.binaries import Binaries
from torchguard._platforms.windows.loader import MISSING, SYMBOL, LoaderModel
from torchguard._platforms.windows.simulate import simulate_import
from torchguard._platforms.windows.tree import AssumedFile, MemoryFile, WinTree

LIB = "C:\\site\\torch\\lib"
APP = "C:\\Python"
SYS = "C:\\Windows\\System32"


# -- the reader --------------------------------------------------------------------------------
def test_names_ordinals_and_forwarders_are_read() -> None:
    image = build_pe(
        ["KERNEL32.dll", "c10.dll"],
        ["late.dll"],
        symbols={"c10.dll": ["?foo@c10@@YAXXZ", 7], "late.dll": ["bar"]},
        exports=["alpha", "beta"],
        ordinal_exports=[13],
        forwarders={"gamma": "other.Target"},
        export_base=10,
    )
    tables = read_symbols(image)
    assert tables.imports["c10.dll"] == (b"?foo@c10@@YAXXZ", 7)
    assert tables.delay_imports == {"late.dll": (b"bar",)}
    assert tables.exports.names == {b"alpha", b"beta", b"gamma"}
    assert tables.exports.ordinals == {10, 11, 12, 13}
    assert tables.exports.forwarders[b"gamma"] == b"other.Target"
    assert tables.exports.damaged is None


def test_the_reader_agrees_with_pefile() -> None:
    """pefile (its limits lifted) is the independent judge of what the tables hold."""
    names = [f"export_{index}" for index in range(300)]
    image = build_pe(
        ["KERNEL32.dll", "c10.dll"],
        symbols={"c10.dll": [f"sym{index}" for index in range(50)] + [3, 9]},
        exports=names,
        forwarders={"fwd": "other.x"},
    )
    ours = read_symbols(image)
    pe = pefile.PE(data=image, fast_load=True, max_symbol_exports=1 << 17)
    pe.parse_data_directories(
        directories=[
            pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_EXPORT"],
            pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"],
        ]
    )
    theirs = {s.name for s in pe.DIRECTORY_ENTRY_EXPORT.symbols if s.name}
    assert ours.exports.names == theirs
    assert ours.exports.ordinals == {s.ordinal for s in pe.DIRECTORY_ENTRY_EXPORT.symbols}
    (c10,) = [e for e in pe.DIRECTORY_ENTRY_IMPORT if e.dll.lower() == b"c10.dll"]
    assert list(ours.imports["c10.dll"]) == [
        s.ordinal if s.import_by_ordinal else s.name for s in c10.imports
    ]


def test_an_export_directory_that_lies_about_its_counts() -> None:
    image = build_pe(exports=["a", "b", "c"], export_counts=(200_000, 150_000))
    exports = read_symbols(image).exports
    assert exports.damaged is not None
    assert {b"a", b"b", b"c"} <= exports.names


def test_a_32_bit_image_is_read_too() -> None:
    image = build_pe(["c10.dll"], symbols={"c10.dll": ["x", 5]}, machine=I386, exports=["e"])
    tables = read_symbols(image)
    assert tables.imports["c10.dll"] == (b"x", 5)
    assert tables.exports.names == {b"e"}


@pytest.mark.parametrize("directory", ["import", "delay", "export"])
def test_random_damage_in_the_symbol_tables_never_escapes(directory: str) -> None:
    """Flip bytes inside one directory's data: facts and tables, or PEReadError, nothing else."""
    original = build_pe(
        ["KERNEL32.dll", "c10.dll"],
        ["late.dll"],
        symbols={"c10.dll": ["one", "two", 4], "late.dll": ["three"]},
        exports=["a", "b"],
        forwarders={"f": "x.y"},
    )
    index = {"export": 0, "import": 1, "delay": 13}[directory]
    pe = pefile.PE(data=original, fast_load=True)
    entry = pe.OPTIONAL_HEADER.DATA_DIRECTORY[index]
    start = pe.get_offset_from_rva(entry.VirtualAddress)
    span = max(entry.Size, 64)
    rng = random.Random(index)
    for _ in range(300):
        data = bytearray(original)
        for _ in range(rng.randint(1, 8)):
            data[start + rng.randrange(span)] = rng.randrange(256)
        with contextlib.suppress(PEReadError):
            read_image(bytes(data), symbols=True)


# -- the loader judges every binding ---------------------------------------------------------
def model(files: dict[str, bytes], system: tuple[str, ...] = ("kernel32.dll",)) -> LoaderModel:
    tree = WinTree()
    for path, data in files.items():
        tree.add_file(path, MemoryFile(data, path))
    for name in system:
        tree.add_file(f"{SYS}\\{name}", AssumedFile("test system"))
    binaries = Binaries(tree)
    return LoaderModel(
        tree=tree,
        facts=binaries.facts,
        machine=0x8664,
        app_dir=APP,
        system32=SYS,
        user_dirs=(),
        known_dlls=frozenset(),
        bindings=binaries,
    )


def test_a_missing_name_is_winerror_127() -> None:
    loader = model(
        {
            f"{LIB}\\top.dll": build_pe(["c10.dll"], symbols={"c10.dll": ["kept", "gone"]}),
            f"{LIB}\\c10.dll": build_pe(["KERNEL32.dll"], exports=["kept"]),
        }
    )
    result = loader.load(f"{LIB}\\top.dll")
    (failure,) = result.failures
    assert failure.kind == SYMBOL and failure.leaf == "c10.dll"
    assert failure.gap is not None and failure.gap.missing == ("gone",)
    assert result.winerror == 127 and not result.ok


def test_a_missing_ordinal_is_winerror_182() -> None:
    loader = model(
        {
            f"{LIB}\\top.dll": build_pe(["c10.dll"], symbols={"c10.dll": [2, 9]}),
            f"{LIB}\\c10.dll": build_pe(exports=["a", "b"]),  # ordinals 1 and 2
        }
    )
    result = loader.load(f"{LIB}\\top.dll")
    assert result.winerror == 182
    assert result.failures[0].gap is not None and result.failures[0].gap.missing == ("#9",)


def test_a_missing_dll_is_reported_before_a_missing_symbol() -> None:
    """The loader maps the whole closure before it binds symbols: 126 wins over 127."""
    loader = model(
        {
            f"{LIB}\\top.dll": build_pe(["c10.dll", "gone.dll"], symbols={"c10.dll": ["x"]}),
            f"{LIB}\\c10.dll": build_pe(exports=["y"]),
        }
    )
    result = loader.load(f"{LIB}\\top.dll")
    assert {f.kind for f in result.failures} == {SYMBOL, MISSING}
    assert result.winerror == 126


def test_every_importer_of_a_dll_is_judged() -> None:
    """Two DLLs import from c10.dll: the second binding is checked although c10 is known."""
    loader = model(
        {
            f"{LIB}\\top.dll": build_pe(["a.dll", "c10.dll"]),
            f"{LIB}\\a.dll": build_pe(["c10.dll"], symbols={"c10.dll": ["newer"]}),
            f"{LIB}\\c10.dll": build_pe(),
        }
    )
    result = loader.load(f"{LIB}\\top.dll")
    (failure,) = result.failures
    assert failure.chain == ("top.dll", "a.dll", "c10.dll")


def test_a_damaged_export_table_is_named_as_damage(tmp_path: Path, runtime_dir: Path) -> None:
    """An export table that lies about its counts: the finding blames damage, not a build."""
    torch = FakeTorch()
    torch.extra["torch/lib/c10.dll"] = build_pe(
        KERNEL, exports=["other"], export_counts=(9, 70_000)
    )
    report = torchguard.scan([torch.write(tmp_path / "site")], system32=[runtime_dir])
    errors = [f for f in report.errors if f.code == "missing-symbol"]
    assert errors and all("export table is damaged" in f.message for f in errors)
    assert all("another build" not in f.message for f in errors)
    assert "damaged" in errors[0].hints[0].summary


def test_a_delay_import_missing_a_symbol_fails_only_when_called() -> None:
    loader = model(
        {
            f"{LIB}\\top.dll": build_pe([], ["late.dll"], symbols={"late.dll": ["absent"]}),
            f"{LIB}\\late.dll": build_pe(),
        }
    )
    result = loader.load(f"{LIB}\\top.dll")
    (failure,) = result.failures
    assert failure.kind == SYMBOL and failure.delay and result.ok


def test_forwarders_are_followed() -> None:
    files = {
        f"{LIB}\\top.dll": build_pe(["c10.dll"], symbols={"c10.dll": ["f"]}),
        f"{LIB}\\c10.dll": build_pe(exports=[], forwarders={"f": "mid.g"}),
        f"{LIB}\\mid.dll": build_pe(exports=[], forwarders={"g": "last.h"}),
        f"{LIB}\\last.dll": build_pe(exports=["h"]),
    }
    assert model(files).load(f"{LIB}\\top.dll").ok
    files[f"{LIB}\\last.dll"] = build_pe(exports=["other"])
    result = model(files).load(f"{LIB}\\top.dll")
    assert result.winerror == 127
    assert result.failures[0].leaf == "c10.dll"


def test_a_forwarder_to_a_missing_dll() -> None:
    loader = model(
        {
            f"{LIB}\\top.dll": build_pe(["c10.dll"], symbols={"c10.dll": ["f"]}),
            f"{LIB}\\c10.dll": build_pe(exports=[], forwarders={"f": "nowhere.g"}),
        }
    )
    (failure,) = loader.load(f"{LIB}\\top.dll").failures
    assert failure.gap is not None and failure.gap.forward_missing == "nowhere.dll"


def test_forwarders_into_windows_are_trusted() -> None:
    loader = model(
        {
            f"{LIB}\\top.dll": build_pe(["c10.dll"], symbols={"c10.dll": ["f", "g"]}),
            f"{LIB}\\c10.dll": build_pe(
                exports=[],
                forwarders={"f": "api-ms-win-core-synch-l1-2-0.Sleep", "g": "KERNEL32.X"},
            ),
        }
    )
    assert loader.load(f"{LIB}\\top.dll").ok


def test_windows_own_dlls_are_trusted_offline() -> None:
    """An import from an assumed System32 DLL has no export data: never a finding."""
    loader = model(
        {f"{LIB}\\top.dll": build_pe(["KERNEL32.dll"], symbols={"KERNEL32.dll": ["Zz"]})}
    )
    assert loader.load(f"{LIB}\\top.dll").ok


def test_a_foreign_copy_found_on_path_is_judged_too() -> None:
    """torch's PATH fallback binds a stray libiomp5md.dll: its exports are checked."""
    stray = "C:\\tools\\bin"
    loader = model(
        {
            f"{LIB}\\fbgemm.dll": build_pe(
                ["libiomp5md.dll"], symbols={"libiomp5md.dll": ["omp_get_num_threads"]}
            ),
            f"{stray}\\libiomp5md.dll": build_pe(exports=["something_else"]),
        }
    )
    simulation = simulate_import(loader, LIB, [], [stray])
    assert not simulation.outcome().ok
    assert simulation.outcome().winerror == 127


# -- whole scans, the cache ----------------------------------------------------------------
def mixed_torch() -> FakeTorch:
    """torch_cpu.dll linked against a c10.dll that exports more than the c10.dll installed."""
    torch = FakeTorch()
    new_api = "?_generic_strides@TensorImpl@c10@@QEAA?AV?$ArrayRef@VSymInt@c10@@@2@XZ"
    torch.extra["torch/lib/torch_cpu.dll"] = build_pe(
        torch.graph["torch_cpu.dll"], symbols={"c10.dll": [DEFAULT_SYMBOL, new_api]}
    )
    return torch


def test_scan_reports_missing_symbol(tmp_path: Path, runtime_dir: Path) -> None:
    report = torchguard.scan([mixed_torch().write(tmp_path / "site")], system32=[runtime_dir])
    (error,) = report.errors
    assert error.code == "missing-symbol"
    assert error.missing == "c10.dll" and error.chain == ("shm.dll", "torch_cpu.dll", "c10.dll")
    assert error.symbols[0].startswith("?_generic_strides@TensorImpl@c10@@")
    assert report.import_torch is not None and report.import_torch.winerror == 127
    assert report.import_torch.dll == "shm.dll"
    assert "torch==2.4.1" in error.hints[0].commands[0]
    assert "c10::TensorImpl::_generic_strides" in report.render_text()
    assert error.to_dict()["symbols"] == list(error.symbols)


def test_a_file_replaced_after_install_is_named(tmp_path: Path, runtime_dir: Path) -> None:
    """c10.dll overwritten after pip wrote RECORD: the finding says which file is foreign."""
    site = FakeTorch().write(tmp_path / "site")
    (site / "torch" / "lib" / "c10.dll").write_bytes(build_pe(KERNEL, exports=["other"]))
    report = torchguard.scan([site], system32=[runtime_dir])
    messages = [f.message for f in report.errors if f.code == "missing-symbol"]
    assert messages and all(
        "c10.dll is not the file torch==2.4.1+cpu installed" in m for m in messages
    )
    assert not any("torch_cpu.dll is not the file" in m for m in messages)


def test_ensure_raises_for_a_missing_symbol(tmp_path: Path, runtime_dir: Path) -> None:
    from torchguard._report.errors import error_for

    report = torchguard.scan([mixed_torch().wheel(tmp_path)], system32=[runtime_dir])
    error = error_for(report.errors[0], report)
    assert isinstance(error, torchguard.MissingSymbolError)
    assert isinstance(error, torchguard.TorchDllError) and error.missing == "c10.dll"


def test_a_warm_scan_reuses_edge_verdicts(
    tmp_path: Path, runtime_dir: Path, reads: list[str]
) -> None:
    site = mixed_torch().write(tmp_path / "site")
    cold = torchguard.scan([site], system32=[runtime_dir])
    reads.clear()
    warm = torchguard.scan([site], system32=[runtime_dir])
    assert reads == []
    assert warm.findings == cold.findings
    # the stale c10.dll is replaced by a matching one: the verdict is judged again
    (site / "torch" / "lib" / "c10.dll").write_bytes(
        build_pe(
            ("MSVCP140.dll", *KERNEL),
            exports=[DEFAULT_SYMBOL, cold.errors[0].symbols[0]],
        )
    )
    assert torchguard.scan([site], system32=[runtime_dir]).ok


@pytest.mark.parametrize("wheel", [False, True])
def test_a_bug_in_the_symbol_reader_is_never_a_finding(
    tmp_path: Path, runtime_dir: Path, monkeypatch: pytest.MonkeyPatch, wheel: bool
) -> None:
    """A KeyError inside the export reader (a type zip damage also raises) is our fault."""
    from torchguard._binary.pe import symbols as _symbols

    def broken(image: object) -> object:
        raise KeyError("planted bug")

    monkeypatch.setattr(_symbols, "_exports", broken)
    torch = FakeTorch()
    target = torch.wheel(tmp_path) if wheel else torch.write(tmp_path / "site")
    with pytest.raises(torchguard.InternalError) as raised:
        torchguard.scan([target], system32=[runtime_dir])
    assert isinstance(raised.value.__cause__, KeyError)


def test_verdicts_through_forwarders_are_cached_and_judged_again_when_the_target_changes(
    tmp_path: Path, runtime_dir: Path, reads: list[str]
) -> None:
    """kernel32 -> ntdll style forwarding: a warm scan reads nothing, a changed target counts."""
    torch = FakeTorch()
    torch.extra["torch/lib/torch_cpu.dll"] = build_pe(
        torch.graph["torch_cpu.dll"], symbols={"c10.dll": [DEFAULT_SYMBOL, "fwd"]}
    )
    torch.extra["torch/lib/c10.dll"] = build_pe(
        torch.graph["c10.dll"], exports=[DEFAULT_SYMBOL], forwarders={"fwd": "helper.real"}
    )
    torch.extra["torch/lib/helper.dll"] = build_pe(KERNEL, exports=[DEFAULT_SYMBOL, "real"])
    site = torch.write(tmp_path / "site")
    assert torchguard.scan([site], system32=[runtime_dir]).ok
    reads.clear()
    assert torchguard.scan([site], system32=[runtime_dir]).ok
    assert reads == []
    (site / "torch" / "lib" / "helper.dll").write_bytes(build_pe(KERNEL, exports=["other"]))
    report = torchguard.scan([site], system32=[runtime_dir])
    assert [(f.code, f.missing) for f in report.errors] == [("missing-symbol", "c10.dll")]


# -- demangling ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("symbol", "expected"),
    [
        (
            "?_generic_strides@TensorImpl@c10@@QEAA?AV?$ArrayRef@VSymInt@c10@@@2@XZ",
            "c10::TensorImpl::_generic_strides",
        ),
        ("??0TensorImpl@c10@@QEAA@XZ", "c10::TensorImpl::TensorImpl"),
        ("??1TensorImpl@c10@@UEAA@XZ", "c10::TensorImpl::~TensorImpl"),
        ("?foo@@YAXXZ", "foo"),
        ("?get@Impl@0@QEAAXXZ", "get::Impl::get"),  # "0" refers back to the first name
    ],
)
def test_qualified_names(symbol: str, expected: str) -> None:
    assert qualified_name(symbol) == expected


def test_unreadable_symbols_stay_as_they_are() -> None:
    for symbol in ("PyInit__C", "??4Foo@@QEAAAEAV0@AEBV0@@Z", "??$f@H@@YAXXZ", "?"):
        assert readable(symbol) == symbol

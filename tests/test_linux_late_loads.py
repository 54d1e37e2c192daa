"""Libraries loaded later by name (cuDNN 9's sub-libraries), replayed after ``import torch``.

cuDNN 9's ``libcudnn.so.9`` holds its sub-libraries as bare stems and ``dlopen``s them at the
first cuDNN call with its own RUNPATH; ``libcudnn_graph.so.9`` does the same for the engines.
The fixtures carry those stems as strings, as the real files do (see the real-loader tier).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from elf_builder import build_elf
from linux_elf import write_so
from test_linux_import import analyze, torch_site

from torchguard._binary.elf import ElfReadError
from torchguard._binary.elf.strings import (
    DlopenFacts,
    read_dlopen_facts,
    read_dlopen_stems,
    scan_stems,
)
from torchguard._frontends.pipeline import analyze_linux
from torchguard._platforms.linux.cache import LinuxCache
from torchguard._platforms.linux.system import offline_linux

GRAPH = "libcudnn_graph.so.9"
ENGINES = "libcudnn_engines_precompiled.so.9"
OPS = "libcudnn_ops.so.9"
SUB_RUNPATH = "$ORIGIN:$ORIGIN/../../cublas/lib:$ORIGIN/../../nvrtc/lib"
#: What the dispatcher looks up with dlsym (its .rodata), split over graph and ops.
LOOKUPS = ["cudnnGetVersion", "cudnnCreate", "cudnnCreateTensorDescriptor"]
GRAPH_API = ["cudnnGetVersion", "cudnnCreate", "cudnnBackendExecute"]
OPS_IMPORT = "cudnnBackendExecute"


def _graph(path: Path, api: list[str], stems: tuple[str, ...] = (), **kwargs: object) -> Path:
    """A libcudnn_graph.so.9 exporting ``api`` under its version node, as cuDNN's does (a
    foreign copy here names no engines: those would be searched from its own folder)."""
    kwargs.setdefault("runpath", SUB_RUNPATH)
    return _with_stems(
        path.parent,
        path.name,
        list(stems),
        soname=GRAPH,
        defines=[f"{name}@{GRAPH}" for name in api],
        verdef=[GRAPH],
        **kwargs,
    )


def _with_stems(folder: Path, name: str, stems: list[str], **kwargs: object) -> Path:
    """A shared object whose read-only data names ``stems`` the way cuDNN's binaries do."""
    path = write_so(folder, name, **kwargs)
    path.write_bytes(path.read_bytes() + b"\0" + b"\0".join(s.encode() for s in stems) + b"\0")
    return path


def cudnn_site(root: Path) -> Path:
    """:func:`torch_site` plus the cuDNN 9 wheel's layout, with libtorch_cuda NEEDing libcudnn."""
    site = torch_site(root)
    cudnn = site / "nvidia" / "cudnn" / "lib"
    _with_stems(
        cudnn,
        "libcudnn.so.9",
        ["libcudnn_graph.so", "libcudnn_ops.so", *LOOKUPS],
        runpath="$ORIGIN",
        defines=LOOKUPS,
    )
    _graph(cudnn / GRAPH, GRAPH_API, ("libcudnn_engines_precompiled.so",))
    write_so(
        cudnn,
        OPS,
        runpath=SUB_RUNPATH,
        needed=[GRAPH],
        defines=["cudnnCreateTensorDescriptor"],
        undefined=[f"{OPS_IMPORT}@{GRAPH}"],
        verneed={GRAPH: [GRAPH]},
    )
    write_so(cudnn, ENGINES, runpath=SUB_RUNPATH)
    lib = site / "torch" / "lib"
    rpath = (
        "$ORIGIN/../../nvidia/cuda_runtime/lib:$ORIGIN/../../nvidia/cusparse/lib:"
        "$ORIGIN/../../nvidia/cuda_nvrtc/lib:"
        "$ORIGIN/../../nvidia/cudnn/lib:$ORIGIN"
    )
    write_so(
        lib,
        "libtorch_cuda.so",
        needed=["libcusparse.so.12", "libcudart.so.12", "libcudnn.so.9"],
        rpath=rpath,
        undefined=["cudaMalloc"],
        defines=["_ZN3c104cuda6deviceEv"],
    )
    return site


def test_the_stems_are_read_from_rodata_only() -> None:
    data = build_elf(soname="libcudnn.so.9", rodata=b"\0libcudnn_graph.so\0libcudnn_ops.so\0")
    path_stems = scan_stems(data, "libcudnn")
    assert path_stems == ("libcudnn_graph.so", "libcudnn_ops.so")
    assert scan_stems(b"\0libcudnn_graph.so.9\0xlibcudnn_x.so\0", "libcudnn") == ()


def test_the_stems_of_a_file_with_sections_skip_the_rest(tmp_path: Path) -> None:
    data = build_elf(soname="libcudnn.so.9", rodata=b"\0libcudnn_graph.so\0")
    path = tmp_path / "libcudnn.so.9"
    path.write_bytes(data + b"\0libcudnn_outside.so\0")  # past every section: not data
    assert read_dlopen_stems(path, "libcudnn") == ("libcudnn_graph.so",)


def test_a_healthy_cudnn_has_no_finding(tmp_path: Path) -> None:
    report = analyze(cudnn_site(tmp_path))
    assert report.import_torch is not None and report.import_torch.ok
    assert report.findings == ()


def test_a_missing_sub_library_is_a_first_use_warning_not_an_error(tmp_path: Path) -> None:
    site = cudnn_site(tmp_path)
    (site / "nvidia" / "cudnn" / "lib" / GRAPH).unlink()
    report = analyze(site)
    assert report.import_torch is not None and report.import_torch.ok
    assert report.errors == ()
    (warning,) = report.warnings
    assert warning.code == "missing-dll" and warning.missing == GRAPH
    assert warning.chain == ("libcudnn.so.9", GRAPH)
    assert "first cuDNN call" in warning.message and "import torch works" in warning.message
    assert "nvidia-cudnn-cu12" in warning.hints[0].commands[0]


def test_a_sub_library_of_a_sub_library_is_searched_with_its_runpath(tmp_path: Path) -> None:
    site = cudnn_site(tmp_path)
    (site / "nvidia" / "cudnn" / "lib" / ENGINES).unlink()
    (warning,) = analyze(site).warnings
    assert warning.code == "missing-dll" and warning.chain == (GRAPH, ENGINES)


def test_the_callers_runpath_applies_not_torchs_rpath(tmp_path: Path) -> None:
    """A copy beside torch's libraries is on libtorch_cuda's RPATH, but libcudnn's own
    ``dlopen`` searches libcudnn's RUNPATH: it is not found."""
    site = cudnn_site(tmp_path)
    shutil.move(str(site / "nvidia" / "cudnn" / "lib" / GRAPH), str(site / "torch" / "lib" / GRAPH))
    (warning,) = analyze(site).warnings
    assert warning.code == "missing-dll" and warning.missing == GRAPH


def test_a_copy_on_ld_library_path_wins_the_late_load(tmp_path: Path) -> None:
    site = cudnn_site(tmp_path)
    other = tmp_path / "cuda-12.1" / "lib64"
    _graph(other / GRAPH, GRAPH_API, runpath="$ORIGIN")
    report = analyze(site, ld_library_path=(str(other),))
    assert report.errors == ()
    (warning,) = report.warnings
    assert warning.code == "library-shadowed" and warning.path == f"{other}/{GRAPH}"
    assert "LD_LIBRARY_PATH" in warning.message and "first cuDNN call" in warning.message


def test_the_bare_stem_is_the_last_resort(tmp_path: Path) -> None:
    site = cudnn_site(tmp_path)
    (site / "nvidia" / "cudnn" / "lib" / GRAPH).unlink()
    other = tmp_path / "usr" / "lib"
    _graph(other / "libcudnn_graph.so", GRAPH_API)
    (warning,) = analyze(site, ld_library_path=(str(other),)).warnings
    assert warning.code == "library-shadowed" and warning.path == f"{other}/libcudnn_graph.so"


def test_a_warm_run_reads_no_stems(tmp_path: Path, monkeypatch: object) -> None:
    import torchguard._platforms.linux.cached as pipeline

    site = cudnn_site(tmp_path)
    cache = LinuxCache(tmp_path / "cache")
    analyze_linux(offline_linux([str(site)]), cache=cache)
    calls: list[str] = []

    def counting(path: str, family: str) -> DlopenFacts:
        calls.append(path)
        return DlopenFacts()

    monkeypatch.setattr(pipeline, "read_dlopen_facts", counting)  # type: ignore[attr-defined]
    warm = analyze_linux(offline_linux([str(site)]), cache=LinuxCache(tmp_path / "cache"))
    assert calls == [] and warm.findings == ()


def test_a_damaged_dispatcher_is_a_clear_error_and_no_stems(tmp_path: Path) -> None:
    bad = tmp_path / "libcudnn.so.9"
    bad.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 5)
    with pytest.raises(ElfReadError):
        read_dlopen_stems(bad, "libcudnn")
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    with pytest.raises(ElfReadError):
        read_dlopen_stems(empty, "libcudnn")
    with pytest.raises(ElfReadError):
        read_dlopen_stems(tmp_path / "absent.so", "libcudnn")


def test_a_dispatcher_unreadable_now_is_read_again_next_run(
    tmp_path: Path, monkeypatch: object
) -> None:
    """Access denied or an I/O error says nothing about the file: its stems are not cached
    as "none", so the next run reads them and finds the late loads."""
    import torchguard._platforms.linux.cached as pipeline
    from torchguard._binary.elf import ElfUnreadable

    site = cudnn_site(tmp_path)

    def unreadable(path: str, family: str) -> DlopenFacts:
        raise ElfUnreadable.from_error(PermissionError(13, "Permission denied"))

    with monkeypatch.context() as patch:  # type: ignore[attr-defined]
        patch.setattr(pipeline, "read_dlopen_facts", unreadable)
        analyze_linux(offline_linux([str(site)]), cache=LinuxCache(tmp_path / "cache"))
    calls: list[str] = []

    def counting(path: str, family: str) -> DlopenFacts:
        calls.append(path)
        return read_dlopen_facts(path, family)

    monkeypatch.setattr(pipeline, "read_dlopen_facts", counting)  # type: ignore[attr-defined]
    analyze_linux(offline_linux([str(site)]), cache=LinuxCache(tmp_path / "cache"))
    assert calls


def test_reading_an_unopenable_dispatcher_is_unreadable_not_damage(tmp_path: Path) -> None:
    from torchguard._binary.elf import ElfUnreadable

    with pytest.raises(ElfUnreadable):
        read_dlopen_stems(tmp_path / "absent.so", "libcudnn")
    bad = tmp_path / "libcudnn.so.9"
    bad.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 5)
    with pytest.raises(ElfReadError) as damaged:
        read_dlopen_stems(bad, "libcudnn")
    assert not isinstance(damaged.value, ElfUnreadable)


def _versions(monkeypatch: pytest.MonkeyPatch, versions: dict[str, str]) -> None:
    """The cuDNN version word of the files named (the fixtures' builder writes no data
    objects; the reader itself is checked on the real files in the real-loader tier)."""
    import torchguard._platforms.linux.cached as pipeline

    def with_version(path: str, family: str) -> DlopenFacts:
        found = read_dlopen_facts(path, family)
        version = versions.get(str(Path(path).resolve()), found.version)
        return DlopenFacts(found.stems, found.lookups, version)

    monkeypatch.setattr(pipeline, "read_dlopen_facts", with_version)


def test_a_fully_versioned_name_anywhere_wins_over_the_major_on_ld_library_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cuDNN tries ``.so.9.10.2`` through the whole search before ``.so.9``: a tarball-style
    ``libcudnn_graph.so.9.10.2`` beside the dispatcher beats a ``.so.9`` on LD_LIBRARY_PATH."""
    site = cudnn_site(tmp_path)
    cudnn = site / "nvidia" / "cudnn" / "lib"
    _versions(monkeypatch, {str(cudnn / GRAPH): "9.10.2"})
    (cudnn / "libcudnn_graph.so.9.10.2").symlink_to(GRAPH)
    other = tmp_path / "cuda" / "lib64"
    _graph(other / GRAPH, GRAPH_API)
    report = analyze(site, ld_library_path=(str(other),))
    assert report.findings == ()
    (cudnn / "libcudnn_graph.so.9.10.2").unlink()  # the major alone: the copy on the path wins
    (warning,) = analyze(site, ld_library_path=(str(other),)).warnings
    assert warning.code == "library-shadowed" and warning.path == f"{other}/{GRAPH}"


def test_a_fully_versioned_copy_of_another_build_wins_and_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A system cuDNN of the same release in a default folder (``/usr/lib/...so.9.10.2``):
    found before the wheel's own ``.so.9``, so it is the copy that loads."""
    site = cudnn_site(tmp_path)
    cudnn = site / "nvidia" / "cudnn" / "lib"
    _versions(monkeypatch, {str(cudnn / GRAPH): "9.10.2"})
    system = tmp_path / "usr" / "lib" / "x86_64-linux-gnu"
    _graph(system / "libcudnn_graph.so.9.10.2", GRAPH_API)
    from dataclasses import replace

    host = replace(offline_linux([str(site)]), default_dirs=(str(system),))
    (warning,) = analyze_linux(host).warnings
    assert warning.code == "library-shadowed"
    assert warning.path == f"{system}/libcudnn_graph.so.9.10.2"
    assert "as libcudnn_graph.so.9.10.2" in warning.message


def test_a_shadowing_copy_without_a_looked_up_symbol_says_which_call_aborts(
    tmp_path: Path,
) -> None:
    site = cudnn_site(tmp_path)
    other = tmp_path / "cuda" / "lib64"
    _graph(other / GRAPH, ["cudnnCreate", OPS_IMPORT])  # an impostor without cudnnGetVersion
    report = analyze(site, ld_library_path=(str(other),))
    assert report.errors == ()
    (warning,) = report.warnings
    assert warning.code == "missing-symbol" and warning.severity == "warning"
    assert warning.symbols == ("cudnnGetVersion",) and warning.path == f"{other}/{GRAPH}"
    assert "Could not load symbol cudnnGetVersion" in warning.message
    assert "import torch works" in warning.message


def test_a_sub_library_that_cannot_bind_to_the_shadowing_copy_is_named(tmp_path: Path) -> None:
    """The dispatcher finds what it looks up in the foreign graph, but libcudnn_ops.so.9
    imports ``cudnnBackendExecute@libcudnn_graph.so.9``, which the copy lacks: the
    dispatcher's dlopen of ops fails ("Unable to load any of {...}")."""
    site = cudnn_site(tmp_path)
    other = tmp_path / "cuda" / "lib64"
    _graph(other / GRAPH, ["cudnnGetVersion", "cudnnCreate"])
    shadowed, warning = analyze(site, ld_library_path=(str(other),)).warnings
    assert shadowed.code == "library-shadowed" and shadowed.missing == GRAPH
    assert warning.code == "missing-symbol" and warning.missing == OPS
    assert warning.symbols == (f"{OPS_IMPORT}@{GRAPH}",) and warning.path == f"{other}/{GRAPH}"
    assert f"undefined symbol: {OPS_IMPORT}, version {GRAPH}" in warning.message
    assert "Unable to load any of {libcudnn_ops.so.9, libcudnn_ops.so}" in warning.message


def test_an_older_cudnn_answering_the_version_query_predicts_torchs_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = cudnn_site(tmp_path)
    cudnn = site / "nvidia" / "cudnn" / "lib"
    other = tmp_path / "cuda" / "lib64"
    _graph(other / GRAPH, GRAPH_API)
    _versions(monkeypatch, {str(cudnn / GRAPH): "9.10.2", str(other / GRAPH): "9.1.0"})
    (warning,) = analyze(site, ld_library_path=(str(other),)).warnings
    assert warning.code == "library-shadowed" and warning.path == f"{other}/{GRAPH}"
    assert "cuDNN version incompatibility" in warning.message
    assert "found runtime version (9, 1, 0)" in warning.message
    _versions(monkeypatch, {str(cudnn / GRAPH): "9.10.2", str(other / GRAPH): "9.11.0"})
    (newer,) = analyze(site, ld_library_path=(str(other),)).warnings
    assert "incompatibility" not in newer.message and "cuDNN 9.11.0" in newer.message


def test_a_warm_run_reads_no_symbol_table_for_a_shadowing_copy(tmp_path: Path) -> None:
    from torchguard._platforms.linux.files import PosixFiles

    site = cudnn_site(tmp_path)
    other = tmp_path / "cuda" / "lib64"
    _graph(other / GRAPH, ["cudnnGetVersion", "cudnnCreate"])
    system = offline_linux([str(site)], ld_library_path=(str(other),))
    cold = analyze_linux(system, cache=LinuxCache(tmp_path / "cache"))
    reads: list[str] = []
    original = PosixFiles.symbols

    def counting(self: PosixFiles, path: str) -> object:
        reads.append(path)
        return original(self, path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PosixFiles, "symbols", counting)
        warm = analyze_linux(system, cache=LinuxCache(tmp_path / "cache"))
    assert reads == [] and warm.findings == cold.findings
    assert [f.code for f in warm.findings] == ["library-shadowed", "missing-symbol"]

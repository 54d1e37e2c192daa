"""The ld.so model against glibc's documented and measured rules, on small built ELF files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from linux_elf import EM_AARCH64, write_so

from torchguard._linux.files import PosixFiles
from torchguard._model.ldso import CORRUPT, MISSING, SYMBOL, VERSION, Environment, Ldso


def model(**env: object) -> Ldso:
    return Ldso(PosixFiles(), Environment(default_dirs=(), **env))  # type: ignore[arg-type]


def test_rpath_beats_ld_library_path_and_ld_library_path_beats_runpath(tmp_path: Path) -> None:
    for where in ("rp", "llp", "run"):
        write_so(tmp_path / where, "libdep.so.1")
    write_so(tmp_path, "libr.so", needed=["libdep.so.1"], rpath=f"{tmp_path}/rp")
    write_so(tmp_path, "libu.so", needed=["libdep.so.1"], runpath=f"{tmp_path}/run")
    ld = model(ld_library_path=(str(tmp_path / "llp"),))
    assert ld.dlopen(str(tmp_path / "libr.so")).ok
    assert ld.loaded("libdep.so.1").path == f"{tmp_path}/rp/libdep.so.1"  # type: ignore[union-attr]
    ld = model(ld_library_path=(str(tmp_path / "llp"),))
    assert ld.dlopen(str(tmp_path / "libu.so")).ok
    assert ld.loaded("libdep.so.1").path == f"{tmp_path}/llp/libdep.so.1"  # type: ignore[union-attr]


def test_runpath_hides_rpath_and_serves_only_direct_needs(tmp_path: Path) -> None:
    write_so(tmp_path / "lib", "libc2.so")
    write_so(tmp_path / "lib", "libb.so", needed=["libc2.so"])
    write_so(tmp_path, "libuses_runpath.so", needed=["libb.so"], runpath="$ORIGIN/lib")
    write_so(tmp_path, "libuses_rpath.so", needed=["libb.so"], rpath="$ORIGIN/lib")
    result = model().dlopen(str(tmp_path / "libuses_runpath.so"))
    assert not result.ok and result.error is not None
    assert (result.error.kind, result.error.missing) == (MISSING, "libc2.so")
    assert result.error.chain == ("libuses_runpath.so", "libb.so", "libc2.so")
    assert result.error.message() == (
        "libc2.so: cannot open shared object file: No such file or directory"
    )
    assert model().dlopen(str(tmp_path / "libuses_rpath.so")).ok  # RPATH is inherited


def test_a_loaded_soname_is_reused_before_any_search(tmp_path: Path) -> None:
    first = write_so(tmp_path / "a", "libx.so.1")
    write_so(tmp_path / "b", "libx.so.1")
    write_so(tmp_path / "b", "libuser.so", needed=["libx.so.1"], rpath="$ORIGIN")
    ld = model()
    assert ld.dlopen(str(first)).ok
    assert ld.dlopen(str(tmp_path / "b" / "libuser.so")).ok
    assert ld.loaded("libx.so.1").path == str(first)  # type: ignore[union-attr]


def test_a_second_copy_opened_by_path_is_loaded_again(tmp_path: Path) -> None:
    write_so(tmp_path / "a", "libx.so.1")
    write_so(tmp_path / "b", "libx.so.1")
    ld = model()
    assert ld.dlopen(str(tmp_path / "a" / "libx.so.1")).ok
    assert ld.dlopen(str(tmp_path / "b" / "libx.so.1")).ok
    assert len(ld.objects) == 2


def test_missing_version_node_is_a_version_error(tmp_path: Path) -> None:
    write_so(tmp_path, "libv.so.1", defines=["f@V_1"], verdef=["V_1"])
    write_so(
        tmp_path,
        "libuser.so",
        needed=["libv.so.1"],
        rpath="$ORIGIN",
        undefined=["f@V_2"],
        verneed={"libv.so.1": ["V_2"]},
    )
    result = model().dlopen(str(tmp_path / "libuser.so"))
    assert result.error is not None and result.error.kind == VERSION
    assert result.error.message() == (
        f"{tmp_path}/libv.so.1: version `V_2' not found (required by {tmp_path}/libuser.so)"
    )


def test_symbol_missing_under_its_version_names_both(tmp_path: Path) -> None:
    write_so(
        tmp_path,
        "libnvJitLink.so.12",
        defines=["__nvJitLinkCreate_12_4@libnvJitLink.so.12"],
        verdef=["libnvJitLink.so.12"],
    )
    write_so(
        tmp_path,
        "libcusparse.so.12",
        needed=["libnvJitLink.so.12"],
        runpath="$ORIGIN",
        undefined=["__nvJitLinkCreate_12_8@libnvJitLink.so.12"],
        verneed={"libnvJitLink.so.12": ["libnvJitLink.so.12"]},
    )
    result = model().dlopen(str(tmp_path / "libcusparse.so.12"))
    assert result.error is not None and result.error.kind == SYMBOL
    assert result.error.message() == (
        f"{tmp_path}/libcusparse.so.12: undefined symbol: __nvJitLinkCreate_12_8, "
        "version libnvJitLink.so.12"
    )
    assert result.error.provider == f"{tmp_path}/libnvJitLink.so.12"


def test_rtld_global_exports_to_later_loads_and_a_failed_load_leaves_no_trace(
    tmp_path: Path,
) -> None:
    write_so(tmp_path, "libprovider.so", defines=["shared_thing"])
    write_so(tmp_path, "libconsumer.so", undefined=["shared_thing"])
    ld = model()
    assert ld.dlopen(str(tmp_path / "libprovider.so")).ok  # RTLD_LOCAL
    failed = ld.dlopen(str(tmp_path / "libconsumer.so"))
    assert failed.error is not None and failed.error.kind == SYMBOL
    assert [o.soname for o in ld.objects] == ["libprovider.so"]
    ld = model()
    assert ld.dlopen(str(tmp_path / "libprovider.so"), global_=True).ok
    assert ld.dlopen(str(tmp_path / "libconsumer.so")).ok


def test_another_machine_is_skipped_and_damage_stops_the_search(tmp_path: Path) -> None:
    write_so(tmp_path / "arm", "libd.so", machine=EM_AARCH64)
    write_so(tmp_path / "x86", "libd.so")
    write_so(tmp_path, "libu.so", needed=["libd.so"], rpath=f"{tmp_path}/arm:{tmp_path}/x86")
    ld = model()
    assert ld.dlopen(str(tmp_path / "libu.so")).ok
    assert ld.loaded("libd.so").path == f"{tmp_path}/x86/libd.so"  # type: ignore[union-attr]
    (tmp_path / "arm" / "libd.so").write_bytes(b"\x7fELF\x02\x01")
    result = model().dlopen(str(tmp_path / "libu.so"))
    assert result.error is not None and result.error.kind == CORRUPT
    assert result.error.message().endswith("file too short")


def test_a_copy_the_process_may_not_open_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """glibc's ``open_path`` moves on after EACCES as after ENOENT: a stray unreadable copy
    earlier in the search (a root-only install, umask 077) is no damaged file ending the load.
    """
    write_so(tmp_path / "locked", "libd.so")
    write_so(tmp_path / "open", "libd.so")
    write_so(tmp_path, "libu.so", needed=["libd.so"], rpath=f"{tmp_path}/locked:{tmp_path}/open")
    locked = f"{tmp_path}/locked/libd.so"
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: p != locked and access(p, mode))
    ld = model()
    assert ld.dlopen(str(tmp_path / "libu.so")).ok
    assert ld.loaded("libd.so").path == f"{tmp_path}/open/libd.so"  # type: ignore[union-attr]


def test_cache_and_default_dirs_come_last_and_nodeflib_is_honoured(tmp_path: Path) -> None:
    write_so(tmp_path / "sys", "libs.so.1")
    write_so(tmp_path, "libu.so", needed=["libs.so.1"])
    cache = {"libs.so.1": (f"{tmp_path}/sys/libs.so.1",)}
    ld = Ldso(PosixFiles(), Environment(cache=cache, default_dirs=()))
    assert ld.dlopen(str(tmp_path / "libu.so")).ok
    ld = Ldso(PosixFiles(), Environment(default_dirs=(str(tmp_path / "sys"),)))
    assert ld.loaded("libs.so.1") is None
    assert ld.dlopen(str(tmp_path / "libu.so")).ok


def test_origin_in_ld_library_path_is_the_programs_folder(tmp_path: Path) -> None:
    """ld.so(8) expands $ORIGIN in LD_LIBRARY_PATH too (to the program's folder): an entry such
    as ``$ORIGIN/../lib`` finds what it names, no false missing library."""
    write_so(tmp_path / "lib", "libq.so")
    write_so(tmp_path / "bin", "python3")
    write_so(tmp_path, "libu.so", needed=["libq.so"])
    ld = model(ld_library_path=("$ORIGIN/../lib",))
    ld.start(str(tmp_path / "bin" / "python3"))
    assert ld.dlopen(str(tmp_path / "libu.so")).ok
    assert ld.loaded("libq.so").path == f"{tmp_path}/bin/../lib/libq.so"  # type: ignore[union-attr]


def test_ld_library_path_is_ignored_in_secure_mode(tmp_path: Path) -> None:
    write_so(tmp_path / "llp", "libq.so")
    write_so(tmp_path, "libu.so", needed=["libq.so"])
    assert model(ld_library_path=(str(tmp_path / "llp"),)).dlopen(str(tmp_path / "libu.so")).ok
    secure = model(ld_library_path=(str(tmp_path / "llp"),), secure=True)
    assert not secure.dlopen(str(tmp_path / "libu.so")).ok


def test_provider_without_versions_only_warns(tmp_path: Path) -> None:
    write_so(tmp_path, "libplain.so", defines=["g"])
    write_so(
        tmp_path,
        "libu.so",
        needed=["libplain.so"],
        rpath="$ORIGIN",
        undefined=["g@P_1"],
        verneed={"libplain.so": ["P_1"]},
    )
    assert model().dlopen(str(tmp_path / "libu.so")).ok

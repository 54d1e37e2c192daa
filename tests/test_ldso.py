"""The ld.so model against glibc's documented and measured rules, on small built ELF files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from linux_elf import EM_AARCH64, write_so

from torchguard._platforms.linux.files import PosixFiles
from torchguard._platforms.linux.ldso import CORRUPT, MISSING, SYMBOL, VERSION, Environment, Ldso


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


# -- what glibc itself refuses, and what only torchguard's reader refuses -----------------------


def test_glibcs_own_checks_name_the_failure_in_glibcs_words(tmp_path: Path) -> None:
    from torchguard._platforms.linux.verify import SIGBUS, verify

    good = write_so(tmp_path, "libd.so").read_bytes()
    assert verify(good, len(good)) == verify(good, len(good)).__class__()  # maps fine

    def mutate(at: int, value: int) -> bytes:
        data = bytearray(good)
        data[at] = value
        return bytes(data)

    assert verify(good[:40], 40).reject == "file too short"
    assert verify(mutate(0, 0), len(good)).reject == "invalid ELF header"
    assert verify(mutate(12, 1), len(good)).reject == "nonzero padding in e_ident"
    assert verify(mutate(7, 9), len(good)).reject == "ELF file OS ABI invalid"
    assert verify(mutate(16, 1), len(good)).reject == "only ET_DYN and ET_EXEC can be loaded"
    foreign = verify(mutate(4, 1), len(good))
    assert foreign.foreign and foreign.reject == "wrong ELF class: ELFCLASS32"
    assert verify(mutate(18, 183), len(good)).foreign  # another machine: skipped in a search
    assert verify(good, 4100 * 64).reject == ""
    assert verify(good[:100], 100).reject == "cannot read file data"
    assert verify(good, 4096 * 64).reject == ""
    assert SIGBUS.startswith("the process is killed by SIGBUS")  # judged on gcc's libraries


def test_an_unreadable_dependency_is_carried_unread_and_never_proves_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OSError or MemoryError while reading says nothing about the file: glibc may map it.
    The model takes it as loaded, and a symbol it might define is no proven failure."""
    from torchguard._binary.elf import ElfUnreadable

    write_so(tmp_path / "lib", "libd.so", defines=["d_f"])
    write_so(tmp_path, "libu.so", needed=["libd.so"], rpath="$ORIGIN/lib", undefined=["d_f"])
    facts = PosixFiles.facts

    def flaky(self: PosixFiles, path: str) -> object:
        if path.endswith("lib/libd.so"):
            raise ElfUnreadable("[Errno 5] Input/output error")
        return facts(self, path)

    monkeypatch.setattr(PosixFiles, "facts", flaky)
    ld = model()
    result = ld.dlopen(str(tmp_path / "libu.so"))
    assert result.error is not None and result.error.kind == SYMBOL
    assert result.error.doubt.startswith("libd.so could not be read ([Errno 5]")
    assert [o.unread for o in ld.objects] == []  # rolled back with the failed dlopen
    write_so(tmp_path, "libu2.so", needed=["libd.so"], rpath="$ORIGIN/lib")
    ok = model().dlopen(str(tmp_path / "libu2.so"))
    assert ok.ok and [o.unread.startswith("[Errno 5]") for o in ok.new] == [False, True]


def test_a_dependency_glibc_refuses_is_still_a_proof(tmp_path: Path) -> None:
    write_so(tmp_path / "lib", "libd.so")
    data = bytearray((tmp_path / "lib" / "libd.so").read_bytes())
    data[12] = 1  # nonzero padding in e_ident: torchguard's reader does not mind, glibc does
    (tmp_path / "lib" / "libd.so").write_bytes(bytes(data))
    write_so(tmp_path, "libu.so", needed=["libd.so"], rpath="$ORIGIN/lib")
    result = model().dlopen(str(tmp_path / "libu.so"))
    assert result.error is not None and result.error.kind == CORRUPT and not result.error.doubt
    assert result.error.message().endswith("libd.so: nonzero padding in e_ident")


# -- dynamic string tokens ------------------------------------------------------------------------


def test_dynamic_string_tokens_follow_glibcs_is_dst() -> None:
    from torchguard._platforms.linux.ldso import expand

    def run(entry: str, secure: bool = False) -> str | None:
        return expand(entry, "/o", secure, "lib/x86_64-linux-gnu", lambda: "haswell")

    assert run("$ORIGIN/../$LIB") == "/o/../lib/x86_64-linux-gnu"
    assert run("${ORIGIN}/${PLATFORM}/x") == "/o/haswell/x"
    assert run("$ORIGINAL/$LIBS") == "$ORIGINAL/$LIBS"  # glued to more letters: no token
    assert run("/a/$FOO/b") == "/a/$FOO/b"  # unknown: left as written
    assert run("/a/${LIB") == "/a/${LIB"
    assert run("$ORIGIN/lib", secure=True) == "/o/lib"  # first, then '/': allowed
    assert run("/x/$ORIGIN", secure=True) is None  # anywhere else: the entry is dropped


# -- LD_PRELOAD -------------------------------------------------------------------------------------


def test_preloads_load_first_and_join_the_global_scope(tmp_path: Path) -> None:
    write_so(tmp_path / "pre", "libp.so", defines=["shared_thing"])
    write_so(tmp_path, "libconsumer.so", undefined=["shared_thing"])
    ld = model(preload=(str(tmp_path / "pre" / "libp.so"),))
    ld.start(None)
    assert [o.soname for o in ld.global_scope] == ["libp.so"]
    assert ld.dlopen(str(tmp_path / "libconsumer.so")).ok
    assert not model().dlopen(str(tmp_path / "libconsumer.so")).ok


def test_preload_entries_glibc_cannot_load_are_reported_with_its_words(tmp_path: Path) -> None:
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"\x7fELF\x02")
    ld = model(preload=("/nowhere/libx.so", str(bad)), preload_file=("libnamed.so",))
    ld.start(None)
    assert [p.message() for p in ld.ignored_preloads] == [
        "ERROR: ld.so: object '/nowhere/libx.so' from LD_PRELOAD cannot be preloaded "
        "(cannot open shared object file): ignored.",
        f"ERROR: ld.so: object '{bad}' from LD_PRELOAD cannot be preloaded "
        "(file too short): ignored.",
        "ERROR: ld.so: object 'libnamed.so' from /etc/ld.so.preload cannot be preloaded "
        "(cannot open shared object file): ignored.",
    ]
    assert ld.global_scope == []


def test_secure_mode_preloads_only_set_user_id_names_from_trusted_directories(
    tmp_path: Path,
) -> None:
    """ld.so(8): in secure-execution mode, LD_PRELOAD entries with a slash are ignored, names
    are searched in the standard directories only, and only set-user-ID files load; the
    entries of /etc/ld.so.preload are honoured as always."""
    system = tmp_path / "sys"
    write_so(system, "libsuid.so", defines=["a"])
    write_so(system, "libplain.so", defines=["b"])
    (system / "libsuid.so").chmod(0o4755)
    write_so(tmp_path / "llp", "libllp.so")
    ld = Ldso(
        PosixFiles(),
        Environment(
            default_dirs=(str(system),),
            ld_library_path=(str(tmp_path / "llp"),),
            secure=True,
            preload=(str(system / "libsuid.so"), "libsuid.so", "libplain.so", "libllp.so"),
            preload_file=(str(system / "libplain.so"),),
        ),
    )
    ld.start(None)
    assert [o.soname for o in ld.preloaded] == ["libsuid.so", "libplain.so"]
    assert [p.entry for p in ld.ignored_preloads] == ["libplain.so", "libllp.so"]


def test_split_preload_and_the_preload_file(tmp_path: Path) -> None:
    from torchguard._platforms.linux.process import read_preload_file, split_preload

    assert split_preload(" /a.so:b.so  c.so::") == ("/a.so", "b.so", "c.so")
    assert split_preload(None) == ()
    (tmp_path / "ld.so.preload").write_text("/lib/x.so\n\t/lib/y.so:z.so\n")
    assert read_preload_file(str(tmp_path / "ld.so.preload")) == ("/lib/x.so", "/lib/y.so", "z.so")
    assert read_preload_file(str(tmp_path / "absent")) == ()


# -- hwcaps ---------------------------------------------------------------------------------------


def test_cpu_levels_and_platform_as_glibc_classifies_them() -> None:
    from torchguard._platforms.linux.hwcaps import hwcaps_names, parse_cpuinfo, subdirs

    v2 = "cx16 lahf_lm popcnt pni sse4_1 sse4_2 ssse3"
    v3 = v2 + " avx avx2 bmi1 bmi2 f16c fma abm movbe xsave"
    v4 = v3 + " avx512f avx512bw avx512cd avx512dq avx512vl"
    intel = parse_cpuinfo(f"processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: {v3}\n\n")
    assert (intel.level, intel.platform) == (3, "haswell")
    amd = parse_cpuinfo(f"vendor_id\t: AuthenticAMD\nflags\t\t: {v4}\n\nflags\t: sse\n")
    assert (amd.level, amd.platform) == (4, "x86_64")
    old = parse_cpuinfo(f"vendor_id\t: GenuineIntel\nflags\t\t: {v2}\n")
    assert (old.level, old.platform) == (2, "x86_64")
    assert hwcaps_names(intel) == ("x86-64-v3", "x86-64-v2")
    assert subdirs(intel, (2, 38)) == ("glibc-hwcaps/x86-64-v3", "glibc-hwcaps/x86-64-v2")
    assert subdirs(amd, (2, 36))[3:] == (
        "tls/x86_64/x86_64",
        "tls/x86_64",
        "tls",
        "x86_64/x86_64",
        "x86_64",
    )
    assert subdirs(intel, (2, 31)) == (
        "tls/haswell/x86_64",
        "tls/haswell",
        "tls/x86_64",
        "tls",
        "haswell/x86_64",
        "haswell",
        "x86_64",
    )


def test_a_hwcaps_subdirectory_the_cpu_supports_is_tried_first(tmp_path: Path) -> None:
    from torchguard._platforms.linux.hwcaps import Cpu

    write_so(tmp_path / "lib", "libd.so")
    write_so(tmp_path / "lib" / "glibc-hwcaps" / "x86-64-v3", "libd.so")
    write_so(tmp_path / "lib" / "glibc-hwcaps" / "x86-64-v4", "libd.so")
    write_so(tmp_path, "libu.so", needed=["libd.so"], runpath="$ORIGIN/lib")
    for level, expected in (
        (4, "glibc-hwcaps/x86-64-v4/"),
        (3, "glibc-hwcaps/x86-64-v3/"),
        (2, ""),
    ):
        ld = model(cpu=lambda level=level: Cpu(level, "x86_64"), glibc=(2, 38))
        assert ld.dlopen(str(tmp_path / "libu.so")).ok
        assert ld.loaded("libd.so").path == f"{tmp_path}/lib/{expected}libd.so"  # type: ignore[union-attr]


# -- objects of unknown scope -------------------------------------------------------------------


def test_a_symbol_only_an_earlier_object_of_unknown_scope_defines_is_a_doubt(
    tmp_path: Path,
) -> None:
    write_so(tmp_path, "python3")
    write_so(tmp_path, "libearlier.so", defines=["shared_thing"])
    write_so(tmp_path, "libconsumer.so", undefined=["shared_thing"])
    write_so(tmp_path, "libother.so", undefined=["nowhere_thing"])
    ld = model()
    ld.start(str(tmp_path / "python3"), (str(tmp_path / "libearlier.so"),))
    doubt = ld.dlopen(str(tmp_path / "libconsumer.so")).error
    assert doubt is not None and doubt.kind == SYMBOL
    assert doubt.doubt.startswith("libearlier.so, already loaded by the process, defines it")
    proof = ld.dlopen(str(tmp_path / "libother.so")).error
    assert proof is not None and proof.missing == "nowhere_thing" and not proof.doubt
    assert ld.dlopen(str(tmp_path / "libearlier.so"), global_=True).ok  # now known global
    assert ld.dlopen(str(tmp_path / "libconsumer.so")).ok


def test_a_doubtful_failure_is_a_warning_and_unread_objects_are_named(tmp_path: Path) -> None:
    from torchguard._platforms.linux.ldso import IgnoredPreload, LoadError
    from torchguard._rules.linux_hints import LinuxHints
    from torchguard._rules.linux_missing import load_error_finding
    from torchguard._rules.linux_preload import ignored_preload_findings
    from torchguard._rules.linux_unread import unread_findings

    proof = LoadError(SYMBOL, "/x/libu.so", "f")
    doubt = LoadError(SYMBOL, "/x/libu.so", "f", doubt="libd.so could not be read")
    assert load_error_finding(proof, LinuxHints(), [], None).severity == "error"
    warning = load_error_finding(doubt, LinuxHints(), [], None)
    assert warning.severity == "warning"
    assert warning.message.endswith("Not certain: libd.so could not be read")
    write_so(tmp_path, "libd.so")
    ld = model()
    obj = ld._add_unread(str(tmp_path / "libd.so"), "libd.so", None, "path", "[Errno 5] EIO")
    (finding,) = unread_findings([obj])
    assert (finding.code, finding.severity, finding.dll) == ("unreadable-dll", "warning", "libd.so")
    assert "[Errno 5] EIO" in finding.message
    (ignored,) = ignored_preload_findings([IgnoredPreload("/a.so", "LD_PRELOAD", "why")])
    assert (ignored.code, ignored.severity) == ("missing-dll", "warning")
    assert "cannot be preloaded (why): ignored." in ignored.message


def test_segments_past_the_end_are_a_sigbus_only_beyond_the_last_page() -> None:
    """ld.so maps segments whole; only a page wholly past the end of the file faults (a
    partly present last page reads as zeros)."""
    import struct

    from torchguard._platforms.linux.verify import SIGBUS, verify

    def image(filesz: int, machine: int = 62) -> bytes:
        ident = b"\x7fELF\x02\x01\x01" + bytes(9)
        header = struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 64, 0, 0, 64, 56, 2, 64, 0, 0)
        load = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, filesz, filesz, 0x1000)
        dynamic = struct.pack("<IIQQQQQQ", 2, 6, 0x100, 0x100, 0x100, 0x40, 0x40, 8)
        return ident + header + load + dynamic

    assert verify(image(0x2100), 0x2001).reject == ""  # the third page is partly there
    assert verify(image(0x2100), 0x2000).reject == SIGBUS
    assert verify(image(0x2100, machine=183), 0x2000, machine=183).reject == ""  # 64 KiB pages?
    no_dynamic = bytearray(image(0x100))
    no_dynamic[64 + 56 : 64 + 60] = b"\x04\x00\x00\x00"  # PT_NOTE instead
    assert verify(bytes(no_dynamic), 0x1000).reject == "object file has no dynamic section"
    misaligned = bytearray(image(0x100))
    misaligned[64 + 16 : 64 + 24] = (0x800).to_bytes(8, "little")  # p_vaddr
    assert verify(bytes(misaligned), 0x1000).reject == (
        "ELF load command address/offset not page-aligned"
    )


def test_which_folders_have_hwcaps_subfolders_is_kept_by_folder_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Warm, each search folder costs one stat, not one per possible subfolder; adding a
    subfolder changes the folder's mtime and is seen."""
    from torchguard._platforms.linux.cache import LinuxCache
    from torchguard._platforms.linux.hwcaps import Cpu

    write_so(tmp_path / "lib", "libd.so")
    write_so(tmp_path, "libu.so", needed=["libd.so"], runpath="$ORIGIN/lib")
    store = LinuxCache(None)
    env = Environment(default_dirs=(), cpu=lambda: Cpu(3, "x86_64"), glibc=(2, 36))
    looked: list[str] = []
    is_dir = PosixFiles.is_dir

    def counting(self: PosixFiles, path: str) -> bool:
        looked.append(path)
        return is_dir(self, path)

    monkeypatch.setattr(PosixFiles, "is_dir", counting)
    assert Ldso(PosixFiles(), env, store).dlopen(str(tmp_path / "libu.so")).ok
    assert len(looked) == 5  # glibc-hwcaps, tls, x86_64, haswell, xeon_phi
    looked.clear()
    assert Ldso(PosixFiles(), env, store).dlopen(str(tmp_path / "libu.so")).ok
    assert looked == []
    write_so(tmp_path / "lib" / "glibc-hwcaps" / "x86-64-v3", "libd.so")
    os.utime(tmp_path / "lib", ns=(1, 1))  # a new mtime, whatever the clock's resolution
    ld = Ldso(PosixFiles(), env, store)
    assert ld.dlopen(str(tmp_path / "libu.so")).ok
    assert ld.loaded("libd.so").path.endswith("glibc-hwcaps/x86-64-v3/libd.so")  # type: ignore[union-attr]


def test_live_preloads_are_the_mapped_objects_ld_so_put_there_at_start(tmp_path: Path) -> None:
    """Live, ld.so already did the preloading: an entry is the mapped object it became, and
    one that is not mapped was skipped at start (a file that appeared later is not loaded)."""
    write_so(tmp_path, "python3")
    mapped = write_so(tmp_path / "pre", "libp.so", defines=["shared_thing"])
    later = write_so(tmp_path / "pre", "liblater.so")
    ld = model(preload=(str(mapped), str(later), "/gone/libx.so"))
    ld.start(str(tmp_path / "python3"), (str(mapped),), live=True)
    assert [o.path for o in ld.preloaded] == [str(mapped)]
    assert not ld.preloaded[0].scope_unknown and ld.preloaded[0] in ld.global_scope
    assert [(p.entry, p.reason) for p in ld.ignored_preloads] == [
        (str(later), "not loaded when the process started"),
        ("/gone/libx.so", "cannot open shared object file"),
    ]
    assert len(ld.objects) == 2


def test_a_name_found_nowhere_is_a_doubt_while_a_mapped_object_could_not_be_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchguard._binary.elf import ElfUnreadable

    write_so(tmp_path, "python3")
    mapped = write_so(tmp_path / "m", "libmystery.so.1")
    write_so(tmp_path, "libu.so", needed=["libmystery.so.1"])
    facts = PosixFiles.facts

    def flaky(self: PosixFiles, path: str) -> object:
        if path == str(mapped):
            raise ElfUnreadable("[Errno 5] Input/output error")
        return facts(self, path)

    monkeypatch.setattr(PosixFiles, "facts", flaky)
    ld = model()
    ld.start(str(tmp_path / "python3"), (str(mapped),))
    error = ld.dlopen(str(tmp_path / "libu.so")).error
    assert error is not None and error.kind == MISSING
    assert error.doubt.startswith("libmystery.so.1 is loaded but could not be read")
    proof = model()
    proof.start(str(tmp_path / "python3"))
    missing = proof.dlopen(str(tmp_path / "libu.so")).error
    assert missing is not None and missing.kind == MISSING and not missing.doubt

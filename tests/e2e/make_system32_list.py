"""Generate torchguard's bundled lists of Windows 10/11 x64 system DLLs.

``torchguard/_platforms/windows/data/system32_x64.txt`` — DLL names every clean Windows 10/11 x64 has in System32.
There is no Windows machine here, so the list starts from the ``drive_c/windows/system32`` of a
Wine prefix (made by ``wineboot -i`` through :func:`wine.provision`): every ``*.dll`` that is an
x64 PE image with an export directory. Then everything a clean Windows does *not* ship is removed,
group by group (:data:`EXCLUDED`): the Visual C++ redistributable and its relatives (torchguard
must be able to report them missing), debug CRTs, DirectX end-user-runtime redistributables,
Wine's own modules, third-party and driver-provided DLLs, modules Windows x64 has only in
SysWOW64 or no longer ships, and the Media Feature Pack (absent from the N editions). API sets
(``api-ms-win-*``, ``ext-ms-*``) are left out: torchguard handles them by prefix.

``torchguard/_platforms/windows/data/known_dlls_x64.txt`` — the KnownDLLs of Windows 10/11 x64, from
:data:`KNOWN_DLLS` below (Wine's registry has no KnownDLLs key, so nothing is read from it).

Usage::

    python tests/e2e/make_system32_list.py           # regenerate both files
    python tests/e2e/make_system32_list.py --check   # exit 1 if the names in either file differ
"""

from __future__ import annotations

import argparse
import datetime
import re
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wine

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

REPO: Final = Path(__file__).resolve().parents[2]
DATA: Final = REPO / "torchguard" / "_platforms" / "windows" / "data"
SYSTEM32_FILE: Final = DATA / "system32_x64.txt"
KNOWN_DLLS_FILE: Final = DATA / "known_dlls_x64.txt"

IMAGE_FILE_MACHINE_AMD64: Final = 0x8664
PE32_PLUS_MAGIC: Final = 0x20B
API_SET_PREFIXES: Final = ("api-ms-win-", "ext-ms-")

# (group, reason, pattern). A name is removed when the pattern matches it from its start.
EXCLUDED: Final[tuple[tuple[str, str, str], ...]] = (
    (
        "vc-redist",
        "the Visual C++ redistributable (2002-2022) and its relatives: C++ library, C runtime,"
        " vcruntime, ConcRT, OpenMP, C++/CX, MFC, ATL 7+ and the managed C++ runtime. Windows"
        " ships none of them in System32 (msvcrt, msvcp60, msvcirt, msvcp_win, ucrtbase, atl and"
        " atlthunk are Windows' own and stay)",
        r"(?:msvcp(?:[789]|1\d)|msvcr(?:[789]|1\d)|vcruntime\d|concrt\d|vcomp\d*\.|vccorlib\d"
        r"|mfcm?(?:[789]|1\d)|atl(?:[789]|1\d)|msvcm\d)",
    ),
    (
        "debug-crt",
        "debug C runtimes (Visual Studio only, never redistributable)",
        r"(?:msvcrtd|ucrtbased|msvcirtd|msvcp\d+d|msvcr\d+d|vcruntime\d+d)\.dll",
    ),
    (
        "directx-redist",
        "the DirectX end-user runtime (June 2010) redistributables; Windows 10/11 ship"
        " d3dcompiler_47, xaudio2_8/2_9, xinput1_4, xinput9_1_0 and xinputuap, which stay",
        r"(?:d3dx(?:9|10|11)_\d+|d3dx10|d3dcompiler_(?:3\d|4[0-6])|xinput1_[123]|xaudio2_[0-7]"
        r"|x3daudio1_\d|xactengine\d_\d|xapofx1_\d)\.dll",
    ),
    (
        "wine-only",
        "Wine's own modules (wined3d, winegstreamer, winevulkan, winemapi, winex11, ...)",
        r"wine",
    ),
    (
        "third-party",
        "installed by drivers or third-party software, or a redistributable, never by Windows:"
        " ISDN CAPI, CT-API, OpenCL and Vulkan loaders (GPU drivers), WinPcap, zlib, the Layer"
        " for Unicode, ASPI, Wintab, TWAIN (C:\\Windows, 32-bit), Network Monitor, the update"
        " installer's updspapi, MSXML 4, IE's ieproxy and Tablet PC inkobj (outside System32)",
        r"(?:capi2032|ctapi32|opencl|vulkan-1|wpcap|zlib1|unicows|wnaspi32|wintab32|twain_32"
        r"|npptools|updspapi|msxml4|ieproxy|inkobj)\.dll",
    ),
    (
        "not-in-x64-system32",
        "only in SysWOW64 on x64 Windows (32-bit only: DirectX 8 and earlier, the DirectMusic"
        " performance layer, DirectPlay, 16-bit OLE and VDM support, old CRTs) or no longer"
        " shipped (removed in Vista or later, or an optional feature off by default)",
        r"(?:crtdll|ctl3d32|d3d8|d3dim|d3dim700|d3drm|d3dxof|dmband|dmcompos|dmime|dmscript"
        r"|dmstyle|dmusic32|dplay|dplayx|dpvoice|dpwsockx|dx8vb|iccvid|iprop|msvcrt20|msvcrt40"
        r"|olecli32|olepro32|olesvr32|olethk32|vdmdbg|cards|msnet32|svrapi|pidgen|strmdll|wing32"
        r"|vga|winnls32|rsabase|sccbase|slbcsp|gpkcsp|infosoft|msxml|msxml2|initpki|qmgrprxy"
        r"|riched32)\.dll",
    ),
    (
        "media-feature-pack",
        "Media Foundation, Windows Media Format/Player and their codecs, absent from the N editions"
        " until the Media Feature Pack is installed (windows.media*, rtworkq and drmclien: unsure,"
        " removed to be safe)",
        r"(?:evr|mf|mfplat|mfplay|mfreadwrite|mfmediaengine|mfsrcsnk|mp3dmod|qasf|wmasf|wmp"
        r"|wmvcore|drmclien|rtworkq|windows\.media|windows\.media\.devices|windows\.media\.speech)"
        r"\.dll",
    ),
    (
        "unsure",
        "not known to be in System32 of every Windows 10/11 x64; removed to be safe",
        r"(?:ia2comproxy|xpssvcs)\.dll",
    ),
)

KNOWN_DLLS: Final[tuple[str, ...]] = (
    "advapi32.dll",
    "clbcatq.dll",
    "combase.dll",
    "comdlg32.dll",
    "coml2.dll",
    "difxapi.dll",
    "gdi32.dll",
    "gdiplus.dll",
    "imagehlp.dll",
    "imm32.dll",
    "kernel32.dll",
    "msctf.dll",
    "msvcrt.dll",
    "normaliz.dll",
    "nsi.dll",
    "ntdll.dll",
    "ole32.dll",
    "oleaut32.dll",
    "psapi.dll",
    "rpcrt4.dll",
    "sechost.dll",
    "setupapi.dll",
    "shcore.dll",
    "shell32.dll",
    "shlwapi.dll",
    "user32.dll",
    "wldap32.dll",
    "wow64.dll",
    "wow64cpu.dll",
    "wow64win.dll",
    "ws2_32.dll",
)
"""HKLM\\SYSTEM\\CurrentControlSet\\Control\\Session Manager\\KnownDLLs of Windows 10 and 11 x64."""

KNOWN_DLLS_HEADER: Final = """\
# KnownDLLs of Windows 10 and Windows 11 x64, lower-case, sorted: names the loader always maps
# from System32 (the \\KnownDlls section directory), whatever the search order says.
# Generated by tests/e2e/make_system32_list.py from its KNOWN_DLLS constant; check with
#   python tests/e2e/make_system32_list.py --check
# Source: the REG_SZ values of HKLM\\SYSTEM\\CurrentControlSet\\Control\\Session Manager\\KnownDLLs
# as published in registry dumps of Windows 10 (22H2) and Windows 11 x64 (no Windows machine was
# available to read it here; Wine 8.0's registry has no KnownDLLs key, so Wine was no help), plus
# ntdll.dll, which is always known without being listed. Listed: names both versions have.
# Left out:
# - the DllDirectory / DllDirectory32 values (folders, not DLLs);
# - _wowarmhw=wowarmhw.dll and _xtajit=xtajit.dll: present as values on x64 too, but their files
#   exist only on ARM64 Windows, so x64 never maps them;
# - wow64base.dll, wow64con.dll and xtajit64.dll: added by Windows 11 only (xtajit64 is ARM64's).
# Unsure: whether every Windows 10 release before 22H2 lists difxapi, coml2 and gdiplus (they are
# in 1809+ dumps). Not listed either: the \\KnownDlls directory also holds the import closure of
# these DLLs (kernelbase, kernel.appcore, ucrtbase, msvcp_win, win32u, gdi32full,
# bcryptprimitives, cfgmgr32, ...), which Windows maps as known too; all of them are in System32.
"""


def is_x64_dll_with_exports(path: Path) -> bool:
    """True for an x64 (PE32+, Machine 0x8664) image whose export data directory is non-empty."""
    try:
        with path.open("rb") as f:
            dos = f.read(64)
            if len(dos) < 64 or dos[:2] != b"MZ":
                return False
            (e_lfanew,) = struct.unpack_from("<I", dos, 0x3C)
            f.seek(e_lfanew)
            # Signature (4) + COFF header (20) + PE32+ optional header up to data directory 0 (120).
            head = f.read(4 + 20 + 120)
    except OSError:
        return False
    if len(head) < 4 + 20 + 120 or head[:4] != b"PE\0\0":
        return False
    (machine,) = struct.unpack_from("<H", head, 4)
    opt = 4 + 20
    (magic,) = struct.unpack_from("<H", head, opt)
    if machine != IMAGE_FILE_MACHINE_AMD64 or magic != PE32_PLUS_MAGIC:
        return False
    (rva_count,) = struct.unpack_from("<I", head, opt + 108)
    export_rva, export_size = struct.unpack_from("<II", head, opt + 112)
    return bool(rva_count > 0 and export_rva != 0 and export_size != 0)


def candidate_names(system32: Path) -> list[str]:
    """Lower-cased names of the x64 DLLs with exports in ``system32``, API sets left out."""
    names = {
        p.name.lower()
        for p in system32.iterdir()
        if p.name.lower().endswith(".dll") and p.is_file() and is_x64_dll_with_exports(p)
    }
    return sorted(n for n in names if not n.startswith(API_SET_PREFIXES))


def split(names: Iterable[str]) -> tuple[list[str], dict[str, list[str]]]:
    """Split ``names`` into the kept ones and, per exclusion group, the removed ones."""
    patterns = [(group, re.compile(pattern)) for group, _, pattern in EXCLUDED]
    kept: list[str] = []
    removed: dict[str, list[str]] = {group: [] for group, _, _ in EXCLUDED}
    for name in names:
        group = next((g for g, rx in patterns if rx.match(name)), None)
        if group is None:
            kept.append(name)
        else:
            removed[group].append(name)
    return kept, removed


def _wrapped(prefix: str, words: Sequence[str], width: int = 100) -> list[str]:
    lines: list[str] = []
    line = prefix
    for word in words:
        if len(line) + len(word) + 1 > width and line.strip("# "):
            lines.append(line.rstrip())
            line = "#     "
        line += word + " "
    lines.append(line.rstrip())
    return lines


def render_system32(kept: Sequence[str], removed: dict[str, list[str]], wine_version: str) -> str:
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    header = [
        "# DLL names every clean Windows 10/11 x64 has in C:\\Windows\\System32; lower-case, sorted.",
        "# Generated by tests/e2e/make_system32_list.py (regenerate: run it; verify: --check).",
        "# Source: drive_c/windows/system32 of a Wine prefix made by `wineboot -i` with",
        f"# {wine_version}, on {today}.",
        "# Kept: *.dll files that are x64 PE images ('MZ', e_lfanew at 0x3C, 'PE\\0\\0', Machine",
        "# 0x8664 at e_lfanew+4, PE32+ magic) with a non-empty export directory (data directory 0).",
        "# Left out: api-ms-win-* and ext-ms-* (API sets; torchguard matches them by prefix).",
        "# Removed, because a clean Windows 10/11 x64 does not ship them in System32 (pattern",
        "# groups in make_system32_list.py; decisions cross-checked against delvewheel's list",
        "# of DLLs found on Windows 7 SP1 to 11 x64 install media, which predates Windows 8's",
        "# additions such as combase, ucrtbase, msvcp_win, win32u, shcore, d3d12):",
    ]
    for group, reason, _ in EXCLUDED:
        header += _wrapped(f"# - {group}: ", reason.split())
        header += _wrapped("#   removed: ", removed[group] or ["(none)"])
    return "\n".join([*header, *kept]) + "\n"


def names_in(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="compare with the files, write nothing"
    )
    args = parser.parse_args(argv)

    env = wine.provision(REPO)
    try:
        names = candidate_names(env.system32)
        version = wine.wine_version(env.loader)
    finally:
        env.stop()
    kept, removed = split(names)
    system32_text = render_system32(kept, removed, version)
    known_text = KNOWN_DLLS_HEADER + "".join(f"{n}\n" for n in sorted(KNOWN_DLLS))
    print(
        f"{len(names)} x64 DLLs with exports (API sets left out), {len(kept)} kept", file=sys.stderr
    )

    if args.check:
        stale = [
            path
            for path, text in ((SYSTEM32_FILE, system32_text), (KNOWN_DLLS_FILE, known_text))
            if not path.exists() or names_in(path.read_text("utf-8")) != names_in(text)
        ]
        for path in stale:
            print(f"{path.relative_to(REPO)} is out of date", file=sys.stderr)
        return 1 if stale else 0
    SYSTEM32_FILE.write_text(system32_text, encoding="utf-8")
    KNOWN_DLLS_FILE.write_text(known_text, encoding="utf-8")
    print(
        f"wrote {SYSTEM32_FILE.relative_to(REPO)} and {KNOWN_DLLS_FILE.relative_to(REPO)}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

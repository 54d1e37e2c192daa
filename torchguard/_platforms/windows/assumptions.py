"""The machine an offline analysis assumes, shared by ``scan`` and ``check``.

One default for both: a Windows 10/11 x64 with the current Visual C++ 2015-2022
Redistributable, as nearly every Windows PC has (games, drivers and most installers bring it).
``clean_windows`` drops it. Whatever is assumed is printed as one ``assumed:`` line, so a
verdict never rests on a silent premise.
"""

from __future__ import annotations

from collections.abc import Sequence

VC_REDIST = "the Visual C++ 2015-2022 Redistributable"


def assumed_system32(clean_windows: bool) -> tuple[tuple[str, frozenset[str]], ...]:
    """The ``(source, DLL names)`` pairs present in System32 beyond Windows' own."""
    if clean_windows:
        return ()
    from torchguard._platforms.windows.system import bundled_names

    return ((VC_REDIST, bundled_names("vc_redist_x64.txt")),)


def assumed_line(
    clean_windows: bool,
    system32_dirs: Sequence[str] = (),
    python_dir: str | None = None,
    *,
    platform: str = "win_amd64",
) -> str:
    """The ``assumed:`` line: the Windows, its System32 additions and python.exe's folder
    (``platform`` ``win_arm64``: Windows 11 on ARM64, for ``check --platform win_arm64``)."""
    windows = "Windows 11 ARM64" if platform == "win_arm64" else "Windows 10/11 x64"
    if clean_windows:
        machine = f"a clean {windows} (no Visual C++ redistributable)"
    else:
        machine = f"{windows} with {VC_REDIST} (current); --clean-windows assumes none"
    parts = [machine]
    if system32_dirs:
        parts.append("System32 also holds the DLLs of " + ", ".join(system32_dirs))
    if python_dir is not None:
        parts.append(f"python.exe's folder is {python_dir}")
    return "assumed: " + "; ".join(parts)

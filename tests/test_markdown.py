"""`--markdown`: a report to paste into a GitHub issue; `--redact` hides the user's name."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import FakeTorch, companion, system32

import torchguard
from torchguard._report.markdown import redact


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchguard", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_scan_markdown_has_versions_verdict_findings_and_folded_directories(
    tmp_path: Path, fake_torch: FakeTorch
) -> None:
    fake_torch.extra.update(
        companion("torchvision", "0.19.1", {"torchvision/__init__.py": b""}, {})
    )
    result = run("scan", "--clean-windows", str(fake_torch.write(tmp_path / "site")), "--markdown")
    assert result.returncode == 1, result.stderr
    text = result.stdout
    assert f"| torchguard | {torchguard.__version__} |" in text
    assert "| Python | 3.11 `C:\\Python\\python.exe` |" in text
    assert re.search(r"^\| torch \| 2\.4\.1\+cpu \(cpu\) `", text, re.M)
    assert "| with | torchvision 0.19.1 |" in text
    assert '**Verdict:** `import torch` fails: [WinError 126] Error loading "...\\c10.dll"' in text
    assert "#### error `missing-dll`" in text
    assert "- chain: `c10.dll` → `MSVCP140.dll`" in text
    assert "  ```\n  winget install --id Microsoft.VCRedist.2015+.x64 --exact\n  ```" in text
    details = text[text.index("<details>") :]
    assert "| `C:\\Python\\Lib\\site-packages\\torch\\lib` | torch |" in details
    assert details.rstrip().endswith("</details>")
    assert text.count("```") % 2 == 0 and "\x1b[" not in text


def test_clean_scan_markdown_says_it_imports(tmp_path: Path, fake_torch: FakeTorch) -> None:
    site = fake_torch.write(tmp_path / "site")
    result = run("scan", str(site), "--system32", str(system32(tmp_path / "s32")), "--markdown")
    assert result.returncode == 0, result.stdout
    assert "**Verdict:** `import torch` succeeds; 0 error(s), 0 warning(s)" in result.stdout
    assert "####" not in result.stdout


def test_doctor_markdown_runs_here() -> None:
    result = run("doctor", "--markdown")
    assert result.returncode in (0, 1) and result.stdout.startswith("### torchguard report\n")
    assert "| analysis |" in result.stdout


def test_markdown_and_json_exclude_each_other() -> None:
    result = run("doctor", "--markdown", "--json")
    assert result.returncode == 2 and "not allowed with" in result.stderr


def test_redact_replaces_home_and_user_in_paths() -> None:
    text = (
        "`C:\\Users\\Alice\\venv\\Lib\\torch` and C:/Users/alice/x, "
        "/home/alice/env and /srv/alice/env, alicex and the word alice"
    )
    out = redact(text, home="C:\\Users\\Alice", user="alice")
    assert out == (
        "`~\\venv\\Lib\\torch` and ~/x, /home/<user>/env and /srv/<user>/env, "
        "alicex and the word alice"
    )
    assert redact("D:\\Users\\bob\\a", home="/nonexistent", user="carol") == "D:\\Users\\<user>\\a"


def test_cli_redact_hides_the_home_folder(tmp_path: Path, fake_torch: FakeTorch) -> None:
    home = tmp_path / "home" / "zed-the-user"
    site = fake_torch.write(home / "proj" / "site")
    env = {"HOME": str(home), "USER": "zed-the-user", "LOGNAME": "zed-the-user"}
    result = run("scan", "--clean-windows", str(site), "--markdown", "--redact", env=env)
    assert result.returncode == 1
    assert "zed-the-user" not in result.stdout
    assert "`~/proj/site/torch" in result.stdout
    plain = run("scan", "--clean-windows", str(site), "--markdown", env=env)
    assert "zed-the-user" in plain.stdout


@pytest.mark.parametrize("flag", ["--json", None])
def test_redact_works_for_other_formats(
    tmp_path: Path, fake_torch: FakeTorch, flag: str | None
) -> None:
    home = tmp_path / "zed-the-user"
    site = fake_torch.write(home / "site")
    args = ["scan", "--clean-windows", str(site), "--redact", *([flag] if flag else [])]
    result = run(*args, env={"HOME": str(home), "USER": "zed-the-user"})
    assert result.returncode == 1 and "zed-the-user" not in result.stdout


@pytest.mark.parametrize("name", ["José Smith", "Zoë", "Ann Lee"])
def test_json_redact_hides_user_names_json_would_escape(tmp_path: Path, name: str) -> None:
    """``--json`` escaped ``é`` as ``\\u00e9`` and backslashes before redacting the text, so a
    name with a non-ASCII letter or a space leaked (issue 13.9)."""
    home = tmp_path / name
    site = FakeTorch().write(home / "site")
    result = run(
        "scan",
        str(site),
        "--clean-windows",
        "--json",
        "--redact",
        env={"HOME": str(home), "USER": name},
    )
    assert result.returncode == 1, result.stderr
    text = result.stdout.lower()
    for part in name.lower().split():
        assert part not in text and part.encode("ascii", "backslashreplace").decode() not in text
    assert '"~/site/torch' in result.stdout  # still a usable report


def test_redact_takes_a_spaced_user_folder_whole() -> None:
    out = redact("C:\\Users\\John Smith\\venv and /home/Ann Lee/x", home="/none", user="zz")
    assert out == "C:\\Users\\<user>\\venv and /home/<user>/x"
    assert redact("/home/bob and /srv/x", home="/none", user="zz") == "/home/<user> and /srv/x"

"""`torchguard explain` and the one finding-code reference shared with the README."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchguard._report.explain import _HEADING, first_sentence, parse, reference_text, references

ROOT = Path(__file__).resolve().parent.parent


def readme_section() -> str:
    text = (ROOT / "README.md").read_text("utf-8")
    match = re.search(r"^## Finding codes\n(.*?)(?=^## )", text, re.S | re.M)
    assert match, "README.md has no '## Finding codes' section"
    return re.sub(r"^<!--.*?-->\n", "", match.group(1), flags=re.M)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchguard", *args], capture_output=True, text=True, timeout=60
    )


def test_readme_reference_is_the_bundled_reference_code_by_code() -> None:
    readme, bundled = parse(readme_section()), references()
    source = "torchguard/_report/finding_codes.md (`python tests/test_explain.py` copies README's)"
    missing = [code for code in bundled if code not in readme]
    extra = [code for code in readme if code not in bundled]
    assert not missing, f"README lacks the sections of {missing}; copy them from {source}"
    assert not extra, f"README documents {extra}, absent from {source}; add them there"
    differ = [code for code in bundled if readme[code] != bundled[code]]
    assert not differ, f"README and {source} differ for {differ}"
    assert list(readme) == list(bundled), "the codes are in another order in the README"
    assert readme_section().strip() == reference_text().strip(), "the introductions differ"


def test_every_subsection_heading_is_a_code_heading() -> None:
    odd = [
        line
        for line in readme_section().splitlines()
        if line.startswith("###") and not _HEADING.match(line)
    ]
    assert not odd, (
        f"headings explain cannot read (expected ### `code` or ### `code` (warning)): {odd}"
    )


def test_every_code_the_package_emits_is_documented() -> None:
    """Findings take a ``Code`` (mypy enforces it): the enum and the reference are one set."""
    from torchguard._facts.vocab import Code

    emitted = {str(code) for code in Code}
    assert emitted == set(references()), emitted ^ set(references())


def test_parse_reads_severity_and_body_and_skips_other_headings() -> None:
    text = "Intro.\n\n### `a-code`\nFirst. Second.\n\n### `b-code` (warning)\nB (aside) here.\n## Next\nno"
    refs = parse(text)
    assert [(r.code, r.severity, r.body) for r in refs.values()] == [
        ("a-code", "error", "First. Second."),
        ("b-code", "warning", "B (aside) here."),
    ]
    assert refs["b-code"].summary == "B here."


@pytest.mark.parametrize(
    ("body", "summary"),
    [
        (
            "A DLL is built for another CPU (x86 or ARM64). The loader",
            "A DLL is built for another CPU.",
        ),
        ("`ensure()` ran after (see `x()`. here) it. Later.", "`ensure()` ran after it."),
        ("Folders, e.g. mkl, are missing. Then", "Folders, e.g. mkl, are missing."),
        ("No full stop at all", "No full stop at all"),
    ],
)
def test_first_sentence(body: str, summary: str) -> None:
    assert first_sentence(body) == summary


def test_explain_lists_every_code_with_its_meaning() -> None:
    result = run("explain")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(references())
    assert any(
        line.split()[:2] == ["path-fallback", "warning"] and line.endswith("in the Windows folder.")
        for line in lines
    )


def test_explain_one_code_prints_its_readme_text() -> None:
    result = run("explain", "runtime-too-old")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "runtime-too-old"
    assert parse(readme_section())["runtime-too-old"].body in result.stdout


def test_unknown_code_exits_2_with_the_list() -> None:
    result = run("explain", "missing-dl")
    assert result.returncode == 2 and result.stdout == ""
    assert "unknown finding code 'missing-dl'" in result.stderr
    assert "missing-dll" in result.stderr and "Traceback" not in result.stderr


if __name__ == "__main__":
    # After a merge that edited the README's reference: make it the bundled reference again.
    target = ROOT / "torchguard" / "_report" / "finding_codes.md"
    target.write_text(readme_section().strip() + "\n", "utf-8")
    print(f"wrote {target}")

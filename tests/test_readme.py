"""The README's first screen stays true: the name users install, the commands CI runs, and
the pasted `check` output's assumptions as the code words them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from torchguard._platforms.windows.assumptions import assumed_line

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text("utf-8")
MAIN_JOB = "pip install . && torchguard check torch==2.4.0 --python 3.11"
TESTS = "pip install -e '.[test]' && pytest"


def first_screen() -> str:
    """Everything before the reference: the text down to the first section after Quick start."""
    quick = README.index("## Quick start")
    following = re.search(r"^## ", README[quick + 3 :], re.MULTILINE)
    return README[: quick + 3 + following.start()] if following else README


def distribution_name() -> str:
    if sys.version_info >= (3, 11):
        import tomllib

        return str(tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["name"])
    found = re.search(r'^name = "([^"]+)"', (ROOT / "pyproject.toml").read_text("utf-8"), re.M)
    assert found
    return found[1]


def test_the_first_screen_names_the_distribution_and_says_pypi_torchguard_is_another() -> None:
    screen = first_screen()
    assert distribution_name() == "torch-import-guard"
    assert f"`{distribution_name()}`" in screen
    assert "PyPI's `torchguard` is a **different project**" in screen
    assert 'pip install "git+' in screen and "pipx install" in screen


def test_the_two_quick_start_commands_are_the_ones_ci_runs() -> None:
    screen = first_screen()
    blocks = re.findall(r"```\n(.*?)\n```", screen, re.S)
    assert MAIN_JOB in blocks and TESTS in blocks
    ci = (ROOT / ".ci" / "run").read_text("utf-8")
    assert "pip install -e '.[test]'" in ci and "\npytest\n" in ci
    assert "torchguard check torch==2.4.0 --python 3.11" in ci
    assert "PIP_CONFIG_FILE" not in screen


def test_the_pasted_check_output_states_the_assumption_as_the_code_does() -> None:
    screen = first_screen()
    output = next(b for b in re.findall(r"```\n(.*?)\n```", screen, re.S) if "error[" in b)
    assert assumed_line(False) in output.splitlines()
    assert "checked: pip install torch==2.4.0 for python.org CPython 3.11" in output

"""The Wine tier: provision once per session, collect the agreement table, print it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import wine

ROOT = Path(__file__).resolve().parents[2]
ROWS: list[dict[str, str]] = []


@pytest.fixture(scope="session")
def wine_env() -> Iterator[wine.WineEnv]:
    env = wine.provision(ROOT)
    try:
        yield env
    finally:
        env.stop()
        env.discard_scenarios()


def agreement_table() -> str:
    header = "| scenario | torchguard verdict | predicted `import torch` | real `import torch` | Wine's failed module | agree |"
    lines = [header, "|---|---|---|---|---|---|"]
    for row in ROWS:
        lines.append(
            f"| {row['scenario']} | {row['verdict']} | {row['predicted']} | {row['real']} "
            f"| {row['wine']} | {row['agree']} |"
        )
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not ROWS:
        return
    table = agreement_table()
    target = wine.CACHE_ROOT / "agreement.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(table + "\n", encoding="utf-8")
    terminalreporter.write_sep("-", f"real Windows loader vs torchguard (also in {target})")
    terminalreporter.write_line(table)

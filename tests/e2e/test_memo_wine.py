"""The verdict memo in a real Windows CPython under Wine, with the hook installed.

The first hooked ``import torch`` analyses and leaves a memo; the next process is answered by
it without importing the analysis, and registers the same folders; a folder added to
``PATH`` makes the next process analyse again, and so does a file removed from
``torch\\lib``, which raises the real verdict.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fs_spy import spied
from wine import WineEnv, parse

from torchguard._binary import memo
from torchguard._hook import write_hook_files

pytestmark = pytest.mark.e2e

#: A plain ``import torch`` under the hook, then what happened: whether the memo answered,
#: whether any module of the analysis was imported, the folders registered so far (torch's
#: own included), and torch computing something.
PROBE = """
import json, os, sys
try:
    import torch
    out = {"ok": True, "sum": float(torch.ones(3).sum())}
except ImportError as exc:
    out = {"ok": False, "type": type(exc).__name__, "missing": (getattr(exc, "missing", None) or "").lower()}
memo = sys.modules.get("torchguard._binary.memo")
analysis = ("torchguard._frontends", "torchguard._platforms", "torchguard._rules",
            "torchguard._report", "torchguard._hook", "torchguard._binary.cache")
handles = getattr(os.add_dll_directory, "torchguard_handles", [])
out.update(passed=bool(memo and memo.passed), analysis=sorted(m for m in sys.modules if m.startswith(analysis))[:3],
           registered=[h.path for h in handles], path=os.environ.get("PATH", ""))
print("TG-JSON " + json.dumps(out))
"""


@contextlib.contextmanager
def _settled_system32(env: WineEnv) -> Iterator[None]:
    """System32's state is in every memo: no other test process hides a DLL there meanwhile,
    and one that just did is :data:`memo.RACY` seconds behind."""
    with env.system32_shared():
        since = time.time() - env.system32.stat().st_mtime
        time.sleep(max(0.0, memo.RACY + 0.5 - since))
        yield


def _age(root: Path, when: float) -> None:
    """Date every folder of ``root`` (the copy's folders are new; its files are links)."""
    for folder, _, _ in os.walk(root):
        os.utime(folder, (when, when))


def test_a_second_hooked_import_is_answered_by_the_memo_until_something_changes(
    wine_env: WineEnv, tmp_path: Path
) -> None:
    site = wine_env.make_scenario_site("memo-hook")
    write_hook_files(site)
    _age(site, time.time() - 3600)
    cache = tmp_path / "cache"
    env = {"TORCHGUARD_CACHE_DIR": wine_env.to_windows(cache)}

    with _settled_system32(wine_env):
        missed = parse(wine_env.run(PROBE, site, env=env))
        hit = parse(wine_env.run(PROBE, site, env=env))
    assert missed["ok"] and missed["sum"] == 3.0, missed
    assert not missed["passed"] and missed["analysis"], missed
    assert len(list((cache / memo.FOLDER).glob("*.memo"))) == 1

    assert hit["ok"] and hit["sum"] == 3.0, hit
    assert hit["passed"] and hit["analysis"] == [], hit
    assert hit["registered"] == missed["registered"]

    folder = tmp_path / "on-path"  # a folder added to PATH (Wine puts WINEPATH first)
    folder.mkdir()
    path_env = {**env, "WINEPATH": wine_env.to_windows(folder)}
    on_path = parse(wine_env.run(PROBE, site, env=path_env))
    assert wine_env.to_windows(folder).lower() in str(on_path["path"]).lower().split(";")
    assert on_path["ok"] and not on_path["passed"] and on_path["analysis"], on_path

    wine_env.remove(site / "torch" / "lib" / "uv.dll")
    changed = parse(wine_env.run(PROBE, site, env=env))
    assert not changed["passed"] and changed["analysis"], changed
    assert (changed["ok"], changed.get("type"), changed.get("missing")) == (
        False,
        "MissingDllError",
        "uv.dll",
    )


#: The live Windows analysis after a memo miss, under a spy of every file-system call: the
#: paths it touched that the memo it leaves does not watch (its own cache, Python's and
#: torchguard's own files, a path only ``lstat``-ed, and an absent name below a watched
#: folder aside).
SPY = (
    r"""
import builtins, json, os, sys
from torchguard._binary import memo
from torchguard._frontends import api
assert not memo.check()
"""
    + spied("api._prepare_windows()")
    + r"""
with open(memo.memo_file(), encoding="utf-8") as handle:
    watched = {line.rstrip("\n").split(" ", 2)[2].lower() for line in handle if line.startswith("state ")}
own = tuple(p.lower() for p in (os.environ["TORCHGUARD_CACHE_DIR"], sys.base_prefix, sys.prefix,
            os.path.dirname(os.path.dirname(memo.__file__))))
def present(path):
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path.lower()
print("TG-JSON " + json.dumps({"blocking": report.blocking, "watched": len(watched), "unwatched": sorted(
    path for path, calls in touched.items()
    if path.lower() not in watched and present(path) not in watched
    and not path.lower().startswith(own) and calls != {"lstat"}
)}))
"""
)


def test_the_memo_watches_every_path_the_live_windows_analysis_touches(
    wine_env: WineEnv, tmp_path: Path
) -> None:
    site = wine_env.make_scenario_site("memo-spy")
    _age(site, time.time() - 3600)
    env = {"TORCHGUARD_CACHE_DIR": wine_env.to_windows(tmp_path / "cache")}
    with _settled_system32(wine_env):
        spied = parse(wine_env.run(SPY, site, env=env))
    assert spied["blocking"] is False and spied["watched"], spied
    assert spied["unwatched"] == [], "\n".join(spied["unwatched"])  # type: ignore[arg-type]

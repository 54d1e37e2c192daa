"""`check --env` and `torchguard pip install`, fast tier: pip's report faked at the subprocess
seam (its real schema 1: ``install`` items with ``metadata``, ``download_info``, ``requested``,
and the marker ``environment``), environments made of plain files in tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from torchguard._frontends import env_alternatives, env_resolve, env_target, pip_front
from torchguard._frontends.check_error import CheckError
from torchguard._frontends.env_alternatives import unpinned_family
from torchguard._frontends.env_changes import (
    TorchBuild,
    classify,
    left_behind,
    torch_breaks,
    version_cuda,
    wheel_build,
)
from torchguard._frontends.env_check import check_env
from torchguard._frontends.env_overlay import build_overlay
from torchguard._frontends.env_resolve import Item, elsewhere, parse_report
from torchguard._frontends.env_target import Installed, TargetEnv
from torchguard._frontends.pip_reasons import PipFailure

LINUX = {
    "implementation_name": "cpython",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "platform_system": "Linux",
    "python_full_version": "3.11.7",
    "python_version": "3.11",
    "sys_platform": "linux",
    "platform_python_implementation": "CPython",
}


def entry(
    name: str,
    version: str,
    url: str,
    requested: bool = False,
    requires: Sequence[str] = (),
) -> dict[str, Any]:
    """One item of pip's report as pip 23-25 writes it."""
    return {
        "download_info": {
            "url": url,
            "archive_info": {"hash": "sha256=ab12", "hashes": {"sha256": "ab12"}},
        },
        "is_direct": False,
        "is_yanked": False,
        "requested": requested,
        "metadata": {
            "metadata_version": "2.1",
            "name": name,
            "version": version,
            "requires_dist": list(requires),
        },
    }


def report(*items: dict[str, Any]) -> str:
    return json.dumps(
        {
            "version": "1",
            "pip_version": "23.2.1",
            "install": list(items),
            "environment": LINUX,
        }
    )


PYPI = "https://files.pythonhosted.org/packages/aa/bb/"


def test_parse_report_reads_pips_schema() -> None:
    text = report(
        entry("six", "1.17.0", PYPI + "six-1.17.0-py2.py3-none-any.whl", True),
        entry(
            "torch",
            "2.14.1",
            PYPI + "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl",
            requires=["filelock", 'triton~=3.8.0; platform_system == "Linux"'],
        ),
    )
    resolution = parse_report("WARNING: something pip said first\n" + text)
    six, torch = resolution.items
    assert (six.name, six.version, six.requested, six.pure, six.sha256) == (
        "six",
        "1.17.0",
        True,
        True,
        "ab12",
    )
    assert not torch.pure and torch.wheel and not torch.requested
    assert torch.requires[1].startswith("triton")
    assert resolution.environment["sys_platform"] == "linux"
    with pytest.raises(PipFailure):
        parse_report("no report at all")
    with pytest.raises(PipFailure):
        parse_report(json.dumps({"version": "1"}))


def test_local_path_only_for_a_file_on_disk(tmp_path: Path) -> None:
    wheel = tmp_path / "a-1-py3-none-any.whl"
    wheel.write_bytes(b"x")
    here = Item("a", "1", wheel.as_uri(), None, True)
    gone = Item("a", "1", (tmp_path / "b-1-py3-none-any.whl").as_uri(), None, True)
    assert here.local_path == str(wheel)
    assert gone.local_path is None
    assert Item("a", "1", PYPI + "a-1-py3-none-any.whl", None, True).local_path is None


def test_options_installing_elsewhere_are_named() -> None:
    assert elsewhere(["six", "--target", "x"]) == "--target"
    assert elsewhere(["--user", "six"]) == "--user"
    assert elsewhere(["--prefix=/opt", "six"]) == "--prefix"
    assert elsewhere(["six", "-U", "--no-deps"]) is None


def env(tmp_path: Path, *dists: Installed, cuda: str | None = None) -> TargetEnv:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    found = {d.key: d for d in dists}
    if "torch" in found:
        (site / "torch").mkdir(exist_ok=True)
        value = f"'{cuda}'" if cuda else "None"
        (site / "torch" / "version.py").write_text(
            f"__version__ = '{found['torch'].version}'\ncuda: Optional[str] = {value}\n"
        )
    return TargetEnv(
        python=sys.executable,
        version=(3, 11),
        platform="linux",
        prefix=str(tmp_path),
        folders=(str(site),),
        pip="23.2.1",
        dists=found,
    )


TORCH_CPU = Installed("torch", "2.13.0+cpu", ("filelock",))
VISION = Installed("torchvision", "0.28.0", ("numpy", "torch (==2.13.0)", "pillow"))


def item(name: str, version: str, requested: bool = False, *requires: str) -> Item:
    return Item(
        name, version, PYPI + f"{name}-{version}-py3-none-any.whl", None, requested, requires
    )


def test_classify_names_each_change(tmp_path: Path) -> None:
    target = env(tmp_path, TORCH_CPU, VISION, Installed("mpmath", "1.4.1"))
    changes = classify(
        target,
        [
            item("torch", "2.14.1"),
            item("mpmath", "1.3.0"),
            item("torchvision", "0.28.0"),
            item("six", "1.17.0"),
        ],
    )
    assert [c.line for c in changes] == [
        "torch 2.13.0+cpu -> 2.14.1 (upgrade)",
        "mpmath 1.4.1 -> 1.3.0 (downgrade)",
        "torchvision 0.28.0 (reinstalled)",
        "six 1.17.0 (new)",
    ]


def test_a_pin_left_behind_is_a_break(tmp_path: Path) -> None:
    target = env(tmp_path, TORCH_CPU, VISION)
    breaks = left_behind(target, [item("torch", "2.14.1", True)], LINUX)
    assert [b.code for b in breaks] == ["left-behind"]
    assert "torchvision 0.28.0 requires torch==2.13.0" in breaks[0].message
    assert "would become 2.14.1 (it is 2.13.0+cpu today)" in breaks[0].message
    # the same release with its local label still meets the pin: nothing left behind
    assert left_behind(target, [item("torch", "2.13.0+cpu", True)], LINUX) == []


def test_a_pin_whose_marker_does_not_apply_is_not_a_break(tmp_path: Path) -> None:
    windows_only = Installed("node", "1", ('torch==2.13.0; platform_system == "Windows"',))
    target = env(tmp_path, TORCH_CPU, windows_only)
    assert left_behind(target, [item("torch", "2.14.1", True)], LINUX) == []


def test_torch_replaced_unasked_and_gpu_build_lost() -> None:
    before = TorchBuild("2.9.1+cu128", "12.8")
    after = TorchBuild("2.9.1", None)
    pulled = [item("node-pack", "1.0", True, "torch>=2.9"), item("torch", "2.9.1")]
    codes = [b.code for b in torch_breaks(before, after, pulled, LINUX)]
    assert codes == ["gpu-build-lost", "torch-replaced"]
    message = torch_breaks(before, after, pulled, LINUX)[1].message
    assert "node-pack 1.0 requires torch>=2.9" in message
    asked = [item("torch", "2.9.1", True)]
    assert [b.code for b in torch_breaks(before, after, asked, LINUX)] == ["gpu-build-lost"]
    same_kind = TorchBuild("2.10.0+cu128", "12.8")
    assert torch_breaks(before, same_kind, [item("torch", "2.10.0", True)], LINUX) == []


def test_torch_build_read_from_version_py(tmp_path: Path) -> None:
    assert version_cuda("cuda: Optional[str] = '12.8'\n") == "12.8"
    assert version_cuda("cuda = None\n") is None
    assert version_cuda("__version__ = '1'\n") is None
    wheel = tmp_path / "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torch/version.py", "cuda: Optional[str] = '13.0'\n")
    assert wheel_build("2.14.1", str(wheel)) == TorchBuild("2.14.1", "13.0")
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"not a zip")
    assert wheel_build("2.14.1", str(broken)) is None
    assert wheel_build("2.14.1", None) is None


def test_unpinned_family_keeps_everything_else() -> None:
    given = ["torchvision==0.29.1", "-c", "torchvision==1", "six==1.17.0", "xformers[x]>=0.1"]
    assert unpinned_family(given) == [
        "torchvision",
        "-c",
        "torchvision==1",
        "six==1.17.0",
        "xformers[x]",
    ]
    assert unpinned_family(["torch==2.14.1"]) == ["torch==2.14.1"]


def _site(tmp_path: Path) -> tuple[Path, TargetEnv]:
    """A site-packages with torchvision (to be replaced), a shared nvidia/ namespace and six."""
    site = tmp_path / "site"
    files: dict[str, list[str]] = {
        "torchvision": ["torchvision/__init__.py", "torchvision-0.28.0.dist-info/METADATA"],
        "nvidia-a": ["nvidia/a/lib/liba.so.1", "nvidia_a-1.dist-info/METADATA"],
        "nvidia-b": ["nvidia/b/lib/libb.so.1", "nvidia_b-1.dist-info/METADATA"],
        "six": ["six.py", "six-1.16.0.dist-info/METADATA"],
    }
    for paths in files.values():
        for relative in paths:
            path = site / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(relative)
    dists = {
        key: Installed(key, "1", (), tuple(str(site / p) for p in paths))
        for key, paths in files.items()
    }
    target = TargetEnv(sys.executable, (3, 11), "linux", str(tmp_path), (str(site),), "23", dists)
    return site, target


def test_overlay_leaves_out_what_pip_replaces_and_touches_nothing(tmp_path: Path) -> None:
    site, target = _site(tmp_path)
    before = sorted(str(p) for p in site.rglob("*"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    replaced = [target.dists["torchvision"], target.dists["nvidia-a"]]
    new = item("six", "1.17.0", True, "nothing>=1")
    overlay = build_overlay(str(scratch), target.folders, replaced, [], [new])
    mirror = Path(overlay.folders[0])
    assert not (mirror / "torchvision").exists()
    assert not (mirror / "torchvision-0.28.0.dist-info").exists()  # no empty folder left
    assert not (mirror / "nvidia" / "a").exists()
    assert (mirror / "nvidia").is_dir() and not (mirror / "nvidia").is_symlink()
    assert (mirror / "nvidia" / "b").is_symlink()
    assert (mirror / "nvidia" / "b" / "lib" / "libb.so.1").read_text() == "nvidia/b/lib/libb.so.1"
    metadata = (mirror / "six-1.17.0.dist-info" / "METADATA").read_text()
    assert "Version: 1.17.0" in metadata and "Requires-Dist: nothing>=1" in metadata
    assert sorted(str(p) for p in site.rglob("*")) == before


class FakePip:
    """The subprocess seam: pip's dry run answers with a report chosen by its arguments."""

    def __init__(self, answers: dict[str, str], failing: Sequence[str] = ()) -> None:
        self.answers = answers
        self.failing = failing
        self.calls: list[list[str]] = []

    def __call__(
        self, command: Sequence[str], *, timeout: float, status: Any = None
    ) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(command))
        assert command[1:7] == ["-B", "-m", "pip", "install", "--dry-run", "--report"]
        joined = " ".join(command)
        if any(word in joined for word in self.failing):
            return subprocess.CompletedProcess(command, 1, "", "ERROR: ResolutionImpossible")
        for needle, answer in self.answers.items():
            if needle in joined:
                return subprocess.CompletedProcess(command, 0, answer, "")
        raise AssertionError(f"unexpected pip call: {joined}")


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """download.pytorch.org is never asked from the fast tier: it cannot be reached."""
    monkeypatch.setattr(env_alternatives, "_unreachable", lambda url: "no network in this test")


@pytest.fixture
def vision_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TargetEnv:
    target = env(tmp_path, TORCH_CPU, VISION)
    monkeypatch.setattr(env_target, "probe", lambda python: target)
    return target


def test_pure_set_is_safe_without_reading_a_binary(
    vision_env: TargetEnv, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pip = FakePip(
        {"six": report(entry("six", "1.17.0", PYPI + "six-1.17.0-py2.py3-none-any.whl", True))}
    )
    monkeypatch.setattr(env_resolve, "run_watched", pip)
    result = check_env(["six"], cache=str(tmp_path / "cache"))
    assert result.safe and result.report is None
    assert [c.line for c in result.changes] == ["six 1.17.0 (new)"]
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.whl"))
    assert len(pip.calls) == 1


def test_torch_upgrade_under_a_pin_is_refused_with_a_resolved_alternative(
    vision_env: TargetEnv, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    upgrade = report(
        entry("torch", "2.14.1", PYPI + "torch-2.14.1-py3-none-any.whl", True, ["filelock"])
    )
    both = report(
        entry("torch", "2.14.1", PYPI + "torch-2.14.1-py3-none-any.whl", True),
        entry(
            "torchvision",
            "0.29.1",
            PYPI + "torchvision-0.29.1-py3-none-any.whl",
            True,
            ["torch>=2.14.0"],
        ),
    )
    pip = FakePip({"torchvision": both, "torch==2.14.1": upgrade})
    monkeypatch.setattr(env_resolve, "run_watched", pip)
    result = check_env(["torch==2.14.1"], cache=str(tmp_path / "cache"))
    assert not result.safe
    assert [b.code for b in result.breaks] == ["left-behind"]
    assert [a.arguments for a in result.alternatives] == [("torch==2.14.1", "torchvision")]
    assert result.alternatives[0].resolved
    document = result.to_dict()
    assert document["safe"] is False and document["breaks"][0]["code"] == "left-behind"
    json.dumps(document)


def test_torch_pulled_in_is_refused_and_the_constraint_is_resolved(
    vision_env: TargetEnv, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pulled = report(
        entry("node-pack", "1.0", PYPI + "node_pack-1.0-py3-none-any.whl", True, ["torch>=2.14"]),
        entry("torch", "2.14.1", PYPI + "torch-2.14.1-py3-none-any.whl"),
    )
    kept = report(entry("node-pack", "0.9", PYPI + "node_pack-0.9-py3-none-any.whl", True))
    pip = FakePip({" -c ": kept, "node-pack": pulled})
    monkeypatch.setattr(env_resolve, "run_watched", pip)
    result = check_env(["node-pack"], cache=str(tmp_path / "cache"))
    assert "torch-replaced" in [b.code for b in result.breaks]
    assert "node-pack 1.0 requires torch>=2.14" in result.breaks[0].message
    alternative = result.alternatives[0]
    assert alternative.resolved and alternative.arguments[:2] == ("node-pack", "-c")
    pinned = Path(alternative.arguments[2])
    assert pinned.read_text() == "torch==2.13.0+cpu\n"
    assert str(pinned).startswith(str(tmp_path / "cache"))


def test_no_resolvable_alternative_falls_back_to_no_deps(
    vision_env: TargetEnv, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pulled = report(
        entry("node-pack", "1.0", PYPI + "node_pack-1.0-py3-none-any.whl", True, ["torch>=2.14"]),
        entry("torch", "2.14.1", PYPI + "torch-2.14.1-py3-none-any.whl"),
    )
    pip = FakePip({"node-pack": pulled}, failing=[" -c "])
    monkeypatch.setattr(env_resolve, "run_watched", pip)
    result = check_env(["node-pack"], cache=str(tmp_path / "cache"))
    index, alternative = result.alternatives
    pinned = str(tmp_path / "cache" / "constraints" / "torch-2.13.0+cpu.txt")
    assert index.arguments == (
        "node-pack",
        "-c",
        pinned,
        "--extra-index-url",
        "https://download.pytorch.org/whl/cpu",
    )
    assert not index.resolved and "cannot be reached from here" in index.why
    assert alternative.arguments == ("--no-deps", "node-pack==1.0")
    assert not alternative.resolved
    assert "left unmet: node-pack asks for torch>=2.14" in alternative.why
    assert any("pip cannot resolve it" in note for note in result.notes)


def test_the_no_deps_command_says_which_new_dependencies_it_leaves_out(
    vision_env: TargetEnv, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pulled = report(
        entry(
            "node-pack",
            "1.0",
            PYPI + "node_pack-1.0-py3-none-any.whl",
            True,
            ["torch>=2.14", "helper"],
        ),
        entry("helper", "2.0", PYPI + "helper-2.0-py3-none-any.whl"),
        entry("torch", "2.14.1", PYPI + "torch-2.14.1-py3-none-any.whl"),
    )
    monkeypatch.setattr(
        env_resolve, "run_watched", FakePip({"node-pack": pulled}, failing=[" -c "])
    )
    result = check_env(["node-pack", "--no-index"], cache=str(tmp_path / "cache"))
    alternative = result.alternatives[-1]
    assert alternative.arguments == ("--no-deps", "--no-index", "node-pack==1.0")
    assert alternative.why.endswith(
        "left unmet: node-pack asks for torch>=2.14; node-pack asks for helper (not installed)"
    )


def test_the_no_deps_command_keeps_where_pip_finds_packages() -> None:
    """``--no-deps`` pins replace the requirements, never the user's index: a command that
    drops ``--no-index --find-links`` or ``--index-url`` would fetch from elsewhere."""
    from torchguard._frontends.env_alternatives import options_kept

    given = [
        "--no-index",
        "--find-links",
        "C:\\wheels",
        "-r",
        "requirements.txt",
        "--index-url=https://example.org/simple",
        "-rmore.txt",
        "node-pack",
        "-e",
        "./src",
        "--no-deps",
        "-U",
        "-c",
        "pins.txt",
    ]
    assert options_kept(given) == [
        "--no-index",
        "--find-links",
        "C:\\wheels",
        "--index-url=https://example.org/simple",
        "-U",
        "-c",
        "pins.txt",
    ]


def test_pip_failure_is_a_check_error(
    vision_env: TargetEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(env_resolve, "run_watched", FakePip({}, failing=["nothere"]))
    with pytest.raises(CheckError) as raised:
        check_env(["nothere==9"])
    assert raised.value.kind == "resolution"
    assert "ResolutionImpossible" in "\n".join(raised.value.lines)


def test_a_macos_interpreter_and_target_options_are_refused(
    vision_env: TargetEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(CheckError, match="--target"):
        check_env(["six", "--target", "x"])
    vision_env.platform = "darwin"
    with pytest.raises(CheckError, match="Linux and Windows environments"):
        check_env(["six"])


def test_probe_reads_this_interpreter() -> None:
    here = env_target.probe(sys.executable)
    assert here.version == sys.version_info[:2]
    assert "packaging" in here.dists
    assert any(f.endswith("METADATA") for f in here.dists["packaging"].files)
    with pytest.raises(CheckError, match="no such interpreter"):
        env_target.probe("/nonexistent/python")


# -- torchguard pip install ------------------------------------------------------------------


def test_split_options_takes_torchguards_own_anywhere() -> None:
    assert pip_front.split_options(["install", "--force", "six", "--json", "--python", "/p"]) == (
        True,
        True,
        "/p",
        ["install", "six"],
    )
    assert pip_front.split_options(["install", "-U", "six"]) == (
        False,
        False,
        None,
        ["install", "-U", "six"],
    )


class Ran:
    def __init__(self, code: int = 0) -> None:
        self.code = code
        self.commands: list[list[str]] = []

    def __call__(self, command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.commands.append(command)
        return subprocess.CompletedProcess(command, self.code)


def test_pip_front_refuses_without_running_pip(
    vision_env: TargetEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade = report(entry("torch", "2.14.1", PYPI + "torch-2.14.1-py3-none-any.whl", True))
    monkeypatch.setattr(
        env_resolve, "run_watched", FakePip({"torch": upgrade}, failing=["torchvision"])
    )
    ran = Ran()
    monkeypatch.setattr(pip_front.subprocess, "run", ran)
    assert pip_front.pip_main(["install", "torch==2.14.1", "--json"]) == pip_front.EXIT_REFUSED
    assert ran.commands == []
    document = json.loads(capsys.readouterr().out)
    assert document["ran_pip"] is False and document["check"]["safe"] is False
    assert pip_front.pip_main(["install", "torch==2.14.1", "--force"]) == pip_front.EXIT_INSTALLED
    assert ran.commands == [[sys.executable, "-m", "pip", "install", "torch==2.14.1"]]


def test_pip_front_installs_a_safe_set_with_the_same_arguments(
    vision_env: TargetEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    six = report(entry("six", "1.17.0", PYPI + "six-1.17.0-py2.py3-none-any.whl", True))
    monkeypatch.setattr(env_resolve, "run_watched", FakePip({"six": six}))
    ran = Ran()
    monkeypatch.setattr(pip_front.subprocess, "run", ran)
    code = pip_front.pip_main(["install", "-U", "six", "--python", vision_env.python])
    assert code == pip_front.EXIT_INSTALLED
    assert ran.commands == [[vision_env.python, "-m", "pip", "install", "-U", "six"]]
    assert "nothing that works today would break" in capsys.readouterr().out
    failed = Ran(1)
    monkeypatch.setattr(pip_front.subprocess, "run", failed)
    assert pip_front.pip_main(["install", "six"]) == pip_front.EXIT_PIP_FAILED


def test_pip_front_guards_only_install(capsys: pytest.CaptureFixture[str]) -> None:
    assert pip_front.pip_main(["uninstall", "torch", "--json"]) == pip_front.EXIT_UNCHECKED
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "usage"


def test_cli_routes_pip_and_check_env(
    vision_env: TargetEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torchguard._frontends.cli import main

    upgrade = report(entry("torch", "2.14.1", PYPI + "torch-2.14.1-py3-none-any.whl", True))
    monkeypatch.setattr(
        env_resolve, "run_watched", FakePip({"torch": upgrade}, failing=["torchvision"])
    )
    assert main(["check", "--env", "torch==2.14.1", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["check"]["breaks"][0]["code"] == "left-behind"
    assert main(["check", "--env", "torch==2.14.1", "--no-verify"]) == 1
    text = capsys.readouterr().out
    assert "torchvision 0.28.0 requires torch==2.13.0" in text and "instead" not in text
    ran = Ran()
    monkeypatch.setattr(pip_front.subprocess, "run", ran)
    assert main(["pip", "install", "torch==2.14.1"]) == pip_front.EXIT_REFUSED
    assert ran.commands == []
    assert os.path.exists(vision_env.folders[0])


def test_a_fault_of_torchguards_own_installs_nothing_unless_forced(
    vision_env: TargetEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*_: Any, **__: Any) -> subprocess.CompletedProcess[str]:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(env_resolve, "run_watched", broken)
    ran = Ran()
    monkeypatch.setattr(pip_front.subprocess, "run", ran)
    assert pip_front.pip_main(["install", "six"]) == pip_front.EXIT_INTERNAL
    assert ran.commands == []
    assert "nothing was installed" in capsys.readouterr().err
    assert pip_front.pip_main(["install", "six", "--force"]) == pip_front.EXIT_INSTALLED
    assert ran.commands == [[sys.executable, "-m", "pip", "install", "six"]]


def test_a_candidate_that_still_breaks_is_not_offered(
    vision_env: TargetEnv, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    upgrade = report(entry("torch", "2.14.1", PYPI + "torch-2.14.1-py3-none-any.whl", True))
    # pip answers the candidate naming torchvision with the same set: torchvision stays behind
    monkeypatch.setattr(env_resolve, "run_watched", FakePip({"torch": upgrade}))
    result = check_env(["torch==2.14.1"], cache=str(tmp_path / "cache"))
    assert not any(a.resolved for a in result.alternatives)
    (note,) = [n for n in result.notes if n.startswith("tried:")]
    assert "`pip install torch==2.14.1 torchvision` would still break: [left-behind]" in note


def test_nvidia_library_at_another_cuda_major_is_said(tmp_path: Path) -> None:
    from torchguard._frontends.env_changes import nvidia_notes

    target = env(tmp_path, Installed("nvidia-cudnn-cu12", "9.10.2.21"), Installed("six", "1"))
    notes = nvidia_notes(
        target, [item("nvidia-cudnn-cu13", "9.24.0.43"), item("nvidia-cublas", "13.1.1.3")]
    )
    assert notes == [
        "nvidia-cudnn-cu13 9.24.0.43 joins nvidia-cudnn-cu12 9.10.2.21: two copies of "
        "nvidia-cudnn for two CUDA majors, each loaded by what links it"
    ]


def test_torchs_own_nvidia_pin_left_behind(tmp_path: Path) -> None:
    torch = Installed(
        "torch", "2.9.1+cu128", ('nvidia-cudnn-cu12==9.10.2.21; platform_system == "Linux"',)
    )
    target = env(tmp_path, torch, Installed("nvidia-cudnn-cu12", "9.10.2.21"), cuda="12.8")
    (gone,) = left_behind(target, [item("nvidia-cudnn-cu12", "9.15.0.1", True)], LINUX)
    assert gone.message.startswith("torch 2.9.1+cu128 requires nvidia-cudnn-cu12==9.10.2.21")


def test_a_lost_gpu_build_gets_its_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = env(tmp_path, Installed("torch", "2.9.1+cu128"), cuda="12.8")
    monkeypatch.setattr(env_target, "probe", lambda python: target)
    cpu_wheel = tmp_path / "torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(cpu_wheel, "w") as archive:
        archive.writestr("torch/version.py", "cuda: Optional[str] = None\n")
    asked = report(entry("torch", "2.9.1", cpu_wheel.as_uri(), True))
    monkeypatch.setattr(env_resolve, "run_watched", FakePip({"torch": asked}))
    result = check_env(["--force-reinstall", "torch==2.9.1"], cache=str(tmp_path / "cache"))
    assert [b.code for b in result.breaks] == ["gpu-build-lost"]
    assert result.after == TorchBuild("2.9.1", None)
    index = result.alternatives[0]
    assert index.arguments == (
        "--force-reinstall",
        "torch==2.9.1",
        "--extra-index-url",
        "https://download.pytorch.org/whl/cu128",
    )
    assert not index.resolved

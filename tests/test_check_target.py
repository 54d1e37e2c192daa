"""`check --python 3.13t --platform win_arm64`: the interpreter and the platform asked about.

pip is told the target (tags and markers), the offline scan is told its CPU and build, and a
release with no wheel for it is said as such (``no-matching-wheel``, exit 1), never as a DLL
error. The file lists below are recorded from PyPI's torch page (2026-12-06); the local-index
tests run real pip on ``file://`` indexes of fake wheels, no network; the ``realwheel`` one asks
PyPI (about a second, nothing downloaded).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import TORCH_241_GRAPH, FakeTorch, companion, write_wheel
from packaging.markers import Marker

import torchguard
from torchguard._frontends import check as check_module
from torchguard._frontends.check_text import render_check
from torchguard._frontends.index_files import parse_filename
from torchguard._frontends.no_wheel import no_wheel, target_tags, windows_wheels
from torchguard._frontends.pip_reasons import PipFailure, explain_failure
from torchguard._frontends.pip_windows import windows_markers
from torchguard._frontends.resolve import pip_arguments, valid_python
from torchguard._frontends.target import Target, parse_target
from torchguard._report.colour import Paint

# torch's Windows wheels on PyPI for a few releases, as its index page lists them
TORCH_FILES = [
    *(f"torch-2.4.0-{t}-win_amd64.whl" for t in ("cp38-cp38", "cp39-cp39", "cp310-cp310")),
    *(f"torch-2.4.0-{t}-win_amd64.whl" for t in ("cp311-cp311", "cp312-cp312")),
    "torch-2.4.0-cp312-cp312-manylinux1_x86_64.whl",
    *(f"torch-2.6.0-cp3{m}-cp3{m}-win_amd64.whl" for m in (9, 10, 11, 12, 13)),
    *(f"torch-2.12.0-cp3{m}-cp3{m}-win_amd64.whl" for m in (10, 11, 12, 13, 14)),
    "torch-2.12.0-cp313-cp313t-win_amd64.whl",
    "torch-2.12.0-cp314-cp314t-win_amd64.whl",
    *(f"torch-2.13.0-cp3{m}-cp3{m}-win_amd64.whl" for m in (10, 11, 12, 13, 14)),
    "torch-2.13.0-cp314-cp314t-win_amd64.whl",
    "torch-2.13.0-cp313-cp313-manylinux_2_28_aarch64.whl",
]


def files(names: list[str] = TORCH_FILES) -> list:  # type: ignore[type-arg]
    parsed = [parse_filename(n) for n in names]
    return [f for f in parsed if f is not None]


# --- the target: arguments, pip's options, markers ---------------------------------------


@pytest.mark.parametrize(
    ("python", "platform", "expected"),
    [
        ("3.11", None, Target("3.11", False, "win_amd64")),
        ("3.13t", None, Target("3.13", True, "win_amd64")),
        ("3.14t", "win_arm64", Target("3.14", True, "win_arm64")),
        ("3.12", "WIN_ARM64", Target("3.12", False, "win_arm64")),
        ("3.12t", None, None),  # free-threaded builds start with 3.13
        ("3.13T", None, None),
        ("3.13", "win32", None),
        ("3.13", "linux_x86_64", None),
        ("3", None, None),
        ("3.13tt", None, None),
    ],
)
def test_parse_target(python: str, platform: str | None, expected: Target | None) -> None:
    assert parse_target(python, platform) == expected


def test_valid_python_takes_a_free_threaded_version() -> None:
    assert valid_python("3.13t") and valid_python("3.11")
    assert not valid_python("3.12t") and not valid_python("3.13-arm64")


def _option(arguments: list[str], name: str) -> str:
    return arguments[arguments.index(name) + 1]


@pytest.mark.parametrize(
    ("python", "platform", "abi"),
    [
        ("3.11", "win_amd64", "cp311"),
        ("3.13t", "win_amd64", "cp313t"),
        ("3.13t", "win_arm64", "cp313t"),
        ("3.12", "win_arm64", "cp312"),
    ],
)
def test_pip_is_told_the_target(python: str, platform: str, abi: str) -> None:
    arguments = pip_arguments(["torch"], python, [], "/tmp/x", platform)
    assert _option(arguments, "--platform") == platform
    assert _option(arguments, "--python-version") == python.rstrip("t")
    assert _option(arguments, "--abi") == abi  # always given: never the running Python's flags
    assert _option(arguments, "--implementation") == "cp"
    assert "--only-binary=:all:" in arguments and arguments[-1] == "torch"


def test_runner_argument_names_the_platform_only_when_not_the_default() -> None:
    assert Target("3.13", True).runner_argument() == "3.13t"
    assert Target("3.13", True, "win_arm64").runner_argument() == "3.13t:win_arm64"


@pytest.mark.parametrize(
    ("python", "platform", "machine"),
    [("3.12", "win_amd64", "AMD64"), ("3.13t", "win_arm64", "ARM64")],
)
def test_markers_are_those_of_the_target(python: str, platform: str, machine: str) -> None:
    env = windows_markers(python, platform)
    assert env["platform_machine"] == machine
    assert env["sys_platform"] == "win32" and env["platform_system"] == "Windows"
    assert env["python_version"] == python.rstrip("t")
    assert env["python_full_version"] == python.rstrip("t") + ".0"
    arm = Marker('platform_machine == "ARM64" and sys_platform == "win32"')
    assert arm.evaluate(env) == (platform == "win_arm64")
    assert not Marker('platform_machine == "x86_64"').evaluate(env)


def test_target_tags_of_a_free_threaded_python_have_no_stable_abi() -> None:
    tags = {str(t) for t in target_tags(Target("3.13", True, "win_arm64"))}
    assert "cp313-cp313t-win_arm64" in tags and "py3-none-any" in tags
    assert "cp313-cp313-win_arm64" not in tags
    assert not any(t.split("-")[1] == "abi3" for t in tags)  # (a new packaging has abi3t)
    assert not any("win_amd64" in t for t in tags)
    regular = {str(t) for t in target_tags(Target("3.13"))}
    assert "cp39-abi3-win_amd64" in regular and "cp313-cp313t-win_amd64" not in regular


# --- the message, from a recorded file list -----------------------------------------------


def test_windows_wheels_are_listed_by_platform_in_ranges() -> None:
    listed = files(
        [
            *(f"x-1.0-cp3{m}-cp3{m}-win_amd64.whl" for m in (9, 10, 11, 12)),
            "x-1.0-cp313-cp313t-win_amd64.whl",
            "x-1.0-cp311-cp311-win_arm64.whl",
            "x-1.0-cp312-cp312-win_arm64.whl",
            "x-1.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        ]
    )
    assert windows_wheels(listed) == "cp39..cp312, cp313t win_amd64; cp311, cp312 win_arm64"


def test_a_release_without_a_wheel_for_a_newer_python() -> None:
    missing = no_wheel("torch==2.4.0", files(), Target("3.13"))
    assert missing is not None
    assert missing.message.startswith(
        "torch 2.4.0 publishes no wheel for CPython 3.13 on win_amd64 "
        "(its Windows wheels: cp38..cp312 win_amd64)"
    )
    (nearest, older_python) = missing.hints("py -3.13")
    assert nearest == (
        "torch 2.6.0 is the nearest release with a wheel for CPython 3.13 on win_amd64 "
        "(the newest with one: 2.13.0): install it",
        ("py -3.13 -m pip install torch==2.6.0",),
    )
    assert older_python[1] == ("torchguard check torch==2.4.0 --python 3.12",)


def test_free_threaded_gets_the_nearest_release_and_the_regular_build() -> None:
    missing = no_wheel("torch==2.13.0", files(), Target("3.13", True))
    assert missing is not None
    assert "torch 2.13.0 publishes no wheel for CPython 3.13t on win_amd64" in missing.message
    assert "cp310..cp314, cp314t win_amd64" in missing.message
    (nearest, regular) = missing.hints("py -3.13t")
    assert nearest[1] == ("py -3.13t -m pip install torch==2.12.0",)  # older: 2.13.0 dropped it
    assert "the regular build, not free-threaded" in regular[0]
    assert regular[1] == ("torchguard check torch==2.13.0 --python 3.13",)


def test_arm64_is_offered_the_x64_python_it_emulates() -> None:
    missing = no_wheel("torch", files(), Target("3.13", True, "win_arm64"))
    assert missing is not None and not missing.pinned and missing.nearest is None
    assert missing.verdict == "no release of torch has a wheel for CPython 3.13t on win_arm64"
    assert missing.message.startswith(
        "no release of torch publishes a wheel for CPython 3.13t on win_arm64 (the newest, "
        "torch 2.13.0, has Windows wheels: cp310..cp314, cp314t win_amd64)"
    )  # the aarch64 Linux wheel is no Windows one
    hints = missing.hints("py -3.13t")
    assert [h[1] for h in hints] == [
        ("torchguard check torch==2.12.0 --python 3.13t",),
        ("torchguard check torch==2.13.0 --python 3.13",),
    ]
    assert all("Windows on ARM64 runs an x64 Python emulated" in h[0] for h in hints)


@pytest.mark.parametrize(
    ("requirement", "target"),
    [
        ("torch==2.4.0", Target("3.11")),  # it has one: pip failed for another reason
        ("torch==9.9", Target("3.13")),  # no such release
        ("torch==2.6.0", Target("3.13")),
    ],
)
def test_no_message_where_a_wheel_fits_or_nothing_matches(requirement: str, target: Target) -> None:
    assert no_wheel(requirement, files(), target) is None


def test_a_source_only_release_is_not_this() -> None:
    assert no_wheel("x==1.0", files(["x-1.0.tar.gz"]), Target("3.13")) is None


RECORDED_PIP = """\
ERROR: Ignored the following yanked versions: 2.0.0
ERROR: Could not find a version that satisfies the requirement torch==2.4.0 (from versions: 2.6.0, 2.7.0, 2.7.1, 2.8.0, 2.9.0, 2.9.1, 2.10.0, 2.11.0, 2.12.0, 2.12.1, 2.13.0, 2.14.0, 2.14.1, 2.15.0)
ERROR: No matching distribution found for torch==2.4.0
"""


def test_explain_failure_names_the_target_from_pip_s_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchguard._frontends import index_files

    asked: list[tuple[str, str]] = []

    def listed(index: str, project: str) -> list:  # type: ignore[type-arg]
        asked.append((index, project))
        return files()

    monkeypatch.setattr(index_files, "project_files", listed)
    failure = explain_failure(RECORDED_PIP.splitlines(), ["torch==2.4.0"], [], "3.13")
    assert failure.no_wheel is not None
    assert failure.lines[0].startswith("torch 2.4.0 publishes no wheel for CPython 3.13")
    assert failure.lines[1].startswith("Could not find a version")  # pip's own words kept
    assert asked[0] == ("https://pypi.org/simple", "torch")
    arm = explain_failure(RECORDED_PIP.splitlines(), ["torch==2.4.0"], [], "3.11", "win_arm64")
    assert arm.no_wheel is not None and arm.no_wheel.target.platform == "win_arm64"


def _failing_resolve(missing_python: str, platform: str = "win_amd64"):  # type: ignore[no-untyped-def]
    def resolve(arguments: list[str], **options: object) -> object:
        assert options["python"] == missing_python and options["platform"] == platform
        target = parse_target(missing_python, platform)
        assert target is not None
        failure = PipFailure(["Could not find a version ..."])
        failure.no_wheel = no_wheel(arguments[0], files(), target)
        raise failure

    return resolve


def test_check_answers_no_wheel_as_one_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(check_module, "resolve", _failing_resolve("3.13t", "win_arm64"))
    result = check_module.check(
        ["torch==2.13.0"],
        python="3.13t",
        platform="win_arm64",
        cache=str(tmp_path),
        verify_fix=False,
    )
    (finding,) = result.report.findings
    assert finding.code == "no-matching-wheel" and finding.severity == "error"
    assert finding.package is None and not result.report.ok  # exit 1
    assert result.to_dict()["platform"] == "win_arm64"
    assert result.to_dict()["free_threaded"] is True
    text = render_check(result, Paint(False))
    first = text.splitlines()[0]
    assert first == (
        "pip install torch==2.13.0 on Windows ARM64, CPython 3.13t: pip install fails: no wheel "
        "of torch 2.13.0 for CPython 3.13t on win_arm64"
    )
    assert "error[no-matching-wheel]: torch 2.13.0 publishes no wheel" in text
    assert "DLL" not in text and "WinError" not in text
    assert "assumed: Windows 11 ARM64 with the Visual C++" in text


def test_markdown_says_pip_install_fails_not_import_torch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from torchguard._frontends.cli import main
    from torchguard._report.markdown import render_markdown

    monkeypatch.setattr(check_module, "resolve", _failing_resolve("3.13"))
    options = ["--python", "3.13", "--cache-dir", str(tmp_path), "--no-verify", "--markdown"]
    assert main(["check", "torch==2.4.0", *options]) == 1
    out = capsys.readouterr().out
    assert (
        "**Verdict:** `pip install` fails: no wheel of torch 2.4.0 for CPython 3.13 on "
        "win_amd64; 1 error(s), 0 warning(s)"
    ) in out
    assert "`import torch` fails" not in out
    # a report alone (no verdict handed in) says the same, in fewer words
    result = check_module.check(
        ["torch==2.4.0"], python="3.13", cache=str(tmp_path), verify_fix=False
    )
    alone = render_markdown(result.report)
    assert "**Verdict:** `pip install` fails: no wheel for the target (no-matching-wheel)" in alone
    assert "`import torch` fails" not in alone


def test_bad_target_options_are_usage_errors() -> None:
    for args in (["--python", "3.12t"], ["--platform", "win32"]):
        done = subprocess.run(
            [sys.executable, "-m", "torchguard", "check", "torch", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert "torchguard: error: --p" in done.stderr


# --- the offline scan is told the target --------------------------------------------------


def test_the_scan_judges_an_x64_wheel_against_the_arm64_python_it_is_told(
    tmp_path: Path,
) -> None:
    from torchguard._binary.pe.machine import ARM64, X64
    from torchguard._frontends.pipeline import analyze
    from torchguard._platforms.windows.assumptions import assumed_system32
    from torchguard._platforms.windows.system import offline_windows

    wheel = FakeTorch(version="2.4.1", platform="win_amd64").wheel(tmp_path)
    for machine, threaded in ((X64, False), (ARM64, True)):
        system = offline_windows(
            [str(wheel)],
            assumed_system32=assumed_system32(False),
            machine=machine,
            free_threaded=threaded,
        )
        try:
            assert system.interpreter.machine == machine
            assert system.interpreter.free_threaded is threaded
            report = analyze(system)
        finally:
            system.close()
        codes = {f.code for f in report.errors}
        assert ("arch-mismatch" in codes) == (machine == ARM64), report.render_text()
    inferred = torchguard.scan([str(wheel)])
    assert inferred.python["machine"] == "x64"  # without a target the wheel's tag decides


# --- real pip on a local index ------------------------------------------------------------

ARM_ONLY = 'platform_machine == "ARM64"'


def _local_index(root: Path) -> str:
    """torch 2.4.1 for cp313t on ARM64 and cp313 on x64, needing ``armhelper`` on ARM64 only."""
    wheels: dict[str, list[tuple[str, dict[str, bytes]]]] = {"torch": [], "armhelper": []}
    for tag, platform in (("cp313t", "win_arm64"), ("cp313", "win_amd64")):
        graph = dict(TORCH_241_GRAPH)
        graph["torch_python.dll"] = tuple(
            f"python{tag[2:]}.dll" if d == "python311.dll" else d for d in graph["torch_python.dll"]
        )
        fake = FakeTorch(version="2.4.1", python_tag=tag, platform=platform, graph=graph)
        content = fake.files()
        info = "torch-2.4.1.dist-info"
        content[f"{info}/WHEEL"] = f"Wheel-Version: 1.0\nTag: cp313-{tag}-{platform}\n".encode()
        content[f"{info}/METADATA"] += f"Requires-Dist: armhelper; {ARM_ONLY}\n".encode()
        wheels["torch"].append((f"torch-2.4.1-cp313-{tag}-{platform}.whl", content))
    helper = companion("armhelper", "1.0", {"armhelper/__init__.py": b""}, {})
    helper["armhelper-1.0.dist-info/WHEEL"] = b"Wheel-Version: 1.0\nTag: py3-none-any\n"
    wheels["armhelper"].append(("armhelper-1.0-py3-none-any.whl", helper))
    for project, listed in wheels.items():
        folder = root / "simple" / project
        folder.mkdir(parents=True)
        for name, content in listed:
            write_wheel(folder / name, content)
        links = "".join(f'<a href="{name}">{name}</a>\n' for name, _ in listed)
        (folder / "index.html").write_text(links)
    return (root / "simple").as_uri()


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchguard", "check", "torch==2.4.1", "--no-verify", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )


def test_pip_resolves_the_free_threaded_arm64_wheel_and_its_arm64_dependency(
    tmp_path: Path,
) -> None:
    index = _local_index(tmp_path / "index")
    common = ("--index-url", index, "--cache-dir", str(tmp_path / "cache"), "--json")
    arm = _check("--python", "3.13t", "--platform", "win_arm64", *common)
    assert arm.returncode == 0, arm.stdout + arm.stderr
    data = json.loads(arm.stdout)
    assert sorted(data["check"]["wheels"]) == [
        "armhelper-1.0-py3-none-any.whl",
        "torch-2.4.1-cp313-cp313t-win_arm64.whl",
    ]
    assert data["check"]["platform"] == "win_arm64" and data["check"]["free_threaded"]
    assert data["python"]["machine"] == "arm64"

    x64 = _check("--python", "3.13", *common)
    assert x64.returncode == 0, x64.stdout + x64.stderr
    assert json.loads(x64.stdout)["check"]["wheels"] == ["torch-2.4.1-cp313-cp313-win_amd64.whl"]

    none = _check("--python", "3.13t", *common[:-1])  # no cp313t wheel for x64
    assert none.returncode == 1, none.stdout + none.stderr
    assert "error[no-matching-wheel]: torch 2.4.1 publishes no wheel for CPython 3.13t on " in (
        none.stdout
    )
    assert "(its Windows wheels: cp313 win_amd64; cp313t win_arm64)" in none.stdout


@pytest.mark.realwheel
def test_pypi_torch_240_has_no_wheel_for_python_313(tmp_path: Path) -> None:
    """Real pip against PyPI: nothing is downloaded (pip fails before any wheel)."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "torchguard", "check", "torch==2.4.0", "--python", "3.13"),
            *("--no-verify", "--cache-dir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith(
        "pip install torch==2.4.0 on Windows x64, CPython 3.13: pip install fails: no wheel of "
        "torch 2.4.0 for CPython 3.13 on win_amd64\n"
        "error[no-matching-wheel]: torch 2.4.0 publishes no wheel for CPython 3.13 on win_amd64 "
        "(its Windows wheels: cp38..cp312 win_amd64)"
    )
    assert "py -3.13 -m pip install torch==2.6.0" in done.stdout
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".whl"]


# --- a CUDA build is offered only where one exists ----------------------------------------

NO_CUDA_ON_ARM = "PyTorch publishes no CUDA build for Windows on ARM64"
UNVERIFIED_313T = "(not verified: download.pytorch.org's cp313t wheels were not checked)"


def _cpu_torch_index(root: Path) -> str:
    """torch 2.11.0 (a CPU build, as PyPI's are) for cp313t on x64 and on ARM64."""
    folder = root / "simple" / "torch"
    folder.mkdir(parents=True)
    names = []
    for platform in ("win_amd64", "win_arm64"):
        graph = dict(TORCH_241_GRAPH)
        graph["torch_python.dll"] = tuple(
            "python313t.dll" if d == "python311.dll" else d for d in graph["torch_python.dll"]
        )
        fake = FakeTorch(version="2.11.0", python_tag="cp313t", platform=platform, graph=graph)
        content = fake.files()
        info = "torch-2.11.0.dist-info"
        content[f"{info}/WHEEL"] = f"Wheel-Version: 1.0\nTag: cp313-cp313t-{platform}\n".encode()
        name = f"torch-2.11.0-cp313-cp313t-{platform}.whl"
        write_wheel(folder / name, content)
        names.append(name)
    (folder / "index.html").write_text("".join(f'<a href="{n}">{n}</a>\n' for n in names))
    return (root / "simple").as_uri()


@pytest.fixture(scope="module")
def cpu_index(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _cpu_torch_index(tmp_path_factory.mktemp("cpu-index"))


def _cpu_check(index: str, cache: Path, platform: str, gpus: list[str]) -> check_module.Check:
    return check_module.check(
        ["torch==2.11.0"],
        python="3.13t",
        platform=platform,
        index_urls=[index],
        cache=str(cache),
        gpus=gpus,
        verify_fix=False,
    )


def _commands(result: check_module.Check) -> list[str]:
    return [c for f in result.report.findings for h in f.hints for c in h.commands]


def test_arm64_gets_no_cuda_command(cpu_index: str, tmp_path: Path) -> None:
    result = _cpu_check(cpu_index, tmp_path, "win_arm64", [])
    assert result.report.ok, result.report.render_text()
    assert f"note: torch 2.11.0 here is the CPU build; {NO_CUDA_ON_ARM}" in "\n".join(result.notes)
    assert not any("download.pytorch.org" in line for line in result.notes)

    named = _cpu_check(cpu_index, tmp_path, "win_arm64", ["NVIDIA GeForce RTX 4090"])
    text = "\n".join(named.notes)
    assert not any("download.pytorch.org" in c for c in _commands(named))
    assert not any("download.pytorch.org" in line for line in named.notes), text
    assert (
        f"answer: no torch build uses the GPU on CPython 3.13t on win_arm64: {NO_CUDA_ON_ARM}"
        in (text)
    )
    (finding,) = (f for f in named.report.findings if f.code == "cpu-build-on-gpu")
    assert [h.summary for h in finding.hints] == [f"{NO_CUDA_ON_ARM} (torch runs on the CPU there)"]
    assert named.gpu_answer is not None and named.gpu_answer["command"] is None
    assert named.gpu_answer["not_verified"] is None  # no command to mark


def test_free_threaded_cuda_command_is_marked_not_verified(cpu_index: str, tmp_path: Path) -> None:
    result = _cpu_check(cpu_index, tmp_path, "win_amd64", [])
    (note,) = (line for line in result.notes if "is the CPU build" in line)
    assert (
        f"build, NVIDIA driver 580.00 or newer {UNVERIFIED_313T}: pip install torch==2.11.0 "
        "--index-url https://download.pytorch.org/whl/cu130"
    ) in note

    named = _cpu_check(cpu_index, tmp_path, "win_amd64", ["NVIDIA GeForce RTX 4090"])
    (finding,) = (f for f in named.report.findings if f.code == "cpu-build-on-gpu")
    cuda = [h for h in finding.hints if any("download.pytorch.org" in c for c in h.commands)]
    assert cuda and all(h.summary.endswith(UNVERIFIED_313T) for h in cuda)
    (line,) = (n for n in named.notes if n.startswith("answer: the newest torch"))
    assert line.endswith(UNVERIFIED_313T)
    assert named.gpu_answer is not None and named.gpu_answer["command"]  # kept, but marked
    assert f"({named.gpu_answer['not_verified']})" == UNVERIFIED_313T  # in --json too
    from torchguard._frontends.gpu_answer import answer
    from torchguard._frontends.target_cuda import answer_for_target

    given = answer(["NVIDIA GeForce RTX 4090"], None, (3, 13), ["torch"])
    regular = answer_for_target(given, Target("3.13", False, "win_amd64"))
    assert regular is not None and regular.to_dict()["not_verified"] is None

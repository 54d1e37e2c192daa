"""`check` on the requirement files ai-toolkit, kohya_ss and ComfyUI publish (copies in
tests/published_requirements/, each with its source URL and commit): an answer (exit 0 or 1,
never 2) with what was not checked named, and the unreachable CUDA index said at once.

Fast tier: pip is faked at the subprocess seam (``resolve.run_watched``): it records the
command it was given and reports a fake torch wheel from a local ``file://`` index, so what is
tested is what ``check`` hands pip and what it says. download.pytorch.org is answered as
unreachable (as on this machine) through the probe's memo. The real-wheel tier runs real pip
against PyPI once per file (bounded by ``--resolve-timeout``).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from fakes import FakeTorch
from test_check import local_index

from torchguard._frontends import index_probe, resolve
from torchguard._frontends.cli import main

FILES = Path(__file__).parent / "published_requirements"
AI_TOOLKIT = FILES / "ai-toolkit" / "requirements.txt"
KOHYA = FILES / "kohya_ss" / "requirements_pytorch_windows.txt"
COMFYUI = FILES / "ComfyUI" / "requirements.txt"
CU128 = "https://download.pytorch.org/whl/cu128"
UNREACHABLE = "cannot be reached ([Errno -2] Name or service not known)"
DIFFUSERS = (
    "git+https://github.com/huggingface/diffusers.git@c943837899b16cbae2f619b8dd4f7bb6f07dd81a"
)


def test_every_copy_names_its_source_and_commit() -> None:
    copies = sorted(FILES.glob("*/*.txt"))
    assert len(copies) == 6
    for copy in copies:
        first = copy.read_text().splitlines()[0]
        assert first.startswith("# source: https://github.com/"), copy
        assert f"/{copy.name} (commit " in first, copy


@pytest.fixture(autouse=True)
def pytorch_org_unreachable(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    index_probe.forget()
    monkeypatch.setitem(index_probe._answers, CU128, UNREACHABLE)
    yield
    index_probe.forget()


class FakePip:
    """pip at the subprocess seam: the arguments it got, and a report of one fake torch."""

    def __init__(self, wheel_url: str, version: str) -> None:
        self.commands: list[list[str]] = []
        self.wheel_url, self.version = wheel_url, version

    def __call__(
        self, command: Sequence[str], *, timeout: float, status: object = None
    ) -> subprocess.CompletedProcess[str]:
        words = list(command)
        self.commands.append(words)
        report = words[words.index("--report") + 1]
        install = [
            {
                "download_info": {"url": self.wheel_url, "archive_info": {}},
                "metadata": {"name": "torch", "version": self.version},
            }
        ]
        Path(report).write_text(json.dumps({"version": "1", "install": install}))
        return subprocess.CompletedProcess(words, 0, "", "")

    @property
    def requirements(self) -> list[str]:
        """What the last pip run was asked to install (its options after ``--progress-bar``)."""
        words = self.commands[-1]
        return words[words.index("--progress-bar") + 2 :]


@pytest.fixture
def pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakePip:
    index = local_index(tmp_path / "index", FakeTorch(version="2.4.1"))
    wheel = f"{index}/torch/torch-2.4.1-cp311-cp311-win_amd64.whl"
    fake = FakePip(wheel, "2.4.1")
    monkeypatch.setattr(resolve, "run_watched", fake)
    return fake


def check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, python: str, *arguments: str
) -> tuple[int, dict[str, object], str]:
    options = ["--python", python, "--cache-dir", str(tmp_path / "cache"), "--no-verify"]
    code = main(["check", *options, "--json", "--", *arguments])
    out, err = capsys.readouterr()
    return code, json.loads(out)["check"] if out.strip() else {}, err


def named(result: dict[str, object]) -> list[tuple[str, str]]:
    unchecked = result["unchecked"]
    assert isinstance(unchecked, list)
    return [(u["requirement"], u["where"]) for u in unchecked]


def test_ai_toolkit_answers_with_its_git_diffusers_named(
    pip: FakePip, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result, err = check(capsys, tmp_path, "3.11", "-r", str(AI_TOOLKIT))
    assert code in (0, 1), err
    assert named(result) == [(DIFFUSERS, "requirements_base.txt:4")]
    asked = pip.requirements
    assert asked[:3] == ["torchao==0.10.0", "safetensors", "transformers==5.5.3"]
    assert "lycoris-lora==1.8.3" in asked and asked[-1] == "scipy==1.12.0"
    assert not any("git+" in a for a in asked)


def test_kohya_ss_answers_with_its_cuda_pins_and_local_folder_named(
    pip: FakePip, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """CPython 3.10 as kohya_ss's setup asks; its torch comes from an index out of reach."""
    code, result, err = check(capsys, tmp_path, "3.10", "-r", str(KOHYA))
    assert code in (0, 1), err
    assert err.startswith(f"torchguard: warning: the extra index {CU128} cannot be reached")
    assert named(result) == [
        ("-e ./sd-scripts", "requirements.txt:42"),
        ("torch==2.7.0+cu128", "requirements_pytorch_windows.txt:5"),
        ("torchvision==0.22.0+cu128", "requirements_pytorch_windows.txt:6"),
    ]
    asked = pip.requirements
    assert asked[:3] == ["torch==2.7.0", "torchvision==0.22.0", "xformers>=0.0.30"]
    assert CU128 not in pip.commands[-1] and "fairscale==0.4.13" in asked
    problems = result["index_problems"]
    assert isinstance(problems, list) and [p["url"] for p in problems] == [CU128]


@pytest.mark.parametrize("cuda_line", [False, True], ids=["as-published", "with-cu128-index"])
def test_comfyui_answers_with_and_without_its_cuda_index(
    pip: FakePip, tmp_path: Path, capsys: pytest.CaptureFixture[str], cuda_line: bool
) -> None:
    extra = ["--extra-index-url", CU128] if cuda_line else []
    code, result, err = check(capsys, tmp_path, "3.12", "-r", str(COMFYUI), *extra)
    assert code in (0, 1), err
    assert named(result) == []
    asked = pip.requirements
    assert asked[:5] == [
        "comfyui-frontend-package==1.45.15",
        "comfyui-workflow-templates==0.9.98",
        "comfyui-embedded-docs==0.5.3",
        "torch",
        "torchsde",
    ]
    problems = result["index_problems"]
    assert isinstance(problems, list)
    if cuda_line:
        assert [p["url"] for p in problems] == [CU128]
        assert "not the cu128 one" in str(problems[0]["line"])
        assert CU128 not in pip.commands[-1]
    else:
        assert problems == [] and err == ""


def test_comfyui_portable_gets_the_fix_for_its_own_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from ComfyUI_windows_portable on its ComfyUI/requirements.txt, with pip resolving a
    torch 2.4.0 that needs libomp140: the fix is for python_embeded's pip, pinned to 2.4.1."""
    from fakes import TORCH_241_GRAPH

    graph = dict(TORCH_241_GRAPH)
    graph["fbgemm.dll"] = ("asmjit.dll", "libomp140.x86_64.dll", *graph["fbgemm.dll"][2:])
    index = local_index(tmp_path / "index", FakeTorch(version="2.4.0", graph=graph))
    pip = FakePip(f"{index}/torch/torch-2.4.0-cp311-cp311-win_amd64.whl", "2.4.0")
    monkeypatch.setattr(resolve, "run_watched", pip)
    portable = tmp_path / "ComfyUI_windows_portable"
    (portable / "python_embeded").mkdir(parents=True)
    (portable / "python_embeded" / "python.exe").write_bytes(b"MZ")
    (portable / "ComfyUI").mkdir()
    (portable / "ComfyUI" / "requirements.txt").write_text(COMFYUI.read_text())
    monkeypatch.chdir(portable)
    options = ["--python", "3.12", "--cache-dir", str(tmp_path / "cache"), "--no-verify"]
    code = main(["check", *options, "--", "-r", "ComfyUI/requirements.txt"])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert "python_embeded\\python.exe -m pip install torch==2.4.1\n" in out, out
    assert "py -3.12" not in out


@pytest.mark.realwheel
def test_comfyui_with_its_cuda_line_against_pypi(capsys: pytest.CaptureFixture[str]) -> None:
    """One real run: pip resolves ComfyUI's file for CPython 3.12 against PyPI (wheels from the
    shared cache), with the cu128 index out of reach; bounded by --resolve-timeout."""
    from realwheels import CACHE

    options = ["--python", "3.12", "--cache-dir", str(CACHE), "--resolve-timeout", "300"]
    code = main(["check", *options, "--", "-r", str(COMFYUI), "--extra-index-url", CU128])
    out, err = capsys.readouterr()
    assert code in (0, 1), out + err
    assert err.startswith(f"torchguard: warning: the extra index {CU128} cannot be reached")
    head = out.splitlines()[0]
    assert "(without 1 index(es) that failed: see below)" in head, head
    assert "import torch " in head
    assert f"warning: the extra index {CU128} cannot be reached" in out
    assert "checked: pip install -r " in out

"""`check` on requirement files as published: files read in, VCS/URL/local requirements named
and left out, every index asked before pip runs (a local HTTP server and a closed port stand in
for the indexes; no network)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fakes import FakeTorch, write_wheel
from test_check import local_index, run

from torchguard._frontends import index_probe
from torchguard._frontends.requirement_input import read_requirements

DIFFUSERS = "git+https://github.com/huggingface/diffusers@363d1ab7e24c5ed6c190abb00df66d9edb74383b"


def test_a_published_file_is_read_and_what_cannot_be_resolved_is_named(tmp_path: Path) -> None:
    (tmp_path / "base.txt").write_text("numpy<2  # pinned for the extension\n")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        "# ai-toolkit-like\n"
        "--extra-index-url https://download.pytorch.org/whl/cu126\n"
        "-r base.txt\n"
        "torch==2.4.1\n"
        f"{DIFFUSERS}\n"
        "-e ./sd-scripts\n"
        "lycoris-lora==1.8.3 \\\n"
        "    --hash=sha256:0123\n"
        "pkg @ https://example.org/pkg-1.0.tar.gz\n"
        "wheel @ https://example.org/wheel-1.0-py3-none-any.whl\n"
    )
    given = read_requirements(["-r", str(requirements), "-c", "c.txt"])
    assert given.arguments == [
        "--extra-index-url",
        "https://download.pytorch.org/whl/cu126",
        "numpy<2",
        "torch==2.4.1",
        "lycoris-lora==1.8.3",
        "wheel @ https://example.org/wheel-1.0-py3-none-any.whl",
        "-c",
        str(Path.cwd() / "c.txt"),
    ]
    assert [(u.requirement, u.where) for u in given.unchecked] == [
        (DIFFUSERS, "requirements.txt:5"),
        ("-e ./sd-scripts", "requirements.txt:6"),
        ("pkg @ https://example.org/pkg-1.0.tar.gz", "requirements.txt:9"),
    ]
    assert "VCS requirement" in given.unchecked[0].why
    assert "local folder" in given.unchecked[1].why
    assert "source archive" in given.unchecked[2].why
    assert given.index_urls() == [("--extra-index-url", "https://download.pytorch.org/whl/cu126")]
    assert "--extra-index-url" not in given.without_indexes(
        ["https://download.pytorch.org/whl/cu126"]
    )


def test_an_index_on_a_requirement_line_applies_to_the_run(tmp_path: Path) -> None:
    """kohya_ss's requirements_pytorch_windows.txt: pip takes a line's --index-url for all."""
    cu118 = "https://download.pytorch.org/whl/cu118"
    requirements = tmp_path / "requirements_pytorch_windows.txt"
    requirements.write_text(
        f"torch==2.4.0+cu118 --index-url {cu118}\n"
        f"torchvision==0.19.0+cu118 --index-url {cu118} --hash sha256:00\n"
    )
    given = read_requirements(["-r", str(requirements)])
    assert given.arguments == [
        "torch==2.4.0+cu118",
        "--index-url",
        cu118,
        "torchvision==0.19.0+cu118",
        "--index-url",
        cu118,
    ]
    assert given.index_urls() == [("--index-url", cu118), ("--index-url", cu118)]


class _NotFound(BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:
        self.send_response(404)
        self.end_headers()

    def do_GET(self) -> None:
        self.do_HEAD()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def not_found() -> Iterator[str]:
    """An HTTP server that answers 404 to everything: a mistyped index."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cu126"
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent() -> Iterator[str]:
    """A port that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/simple"
    listener.close()


@pytest.fixture(autouse=True)
def fresh_answers() -> Iterator[None]:
    index_probe.forget()
    yield
    index_probe.forget()


def test_probe_tells_404_refused_and_silent_apart(not_found: str, silent: str) -> None:
    assert index_probe.probe(not_found, timeout=5) == "answers HTTP 404 Not Found"
    refused = index_probe.probe("http://127.0.0.1:9/simple", timeout=5)
    assert refused is not None and refused.startswith("cannot be reached (")
    assert index_probe.probe(silent, timeout=1) == "did not answer within 1 s"


def test_a_cuda_index_that_fails_says_the_answer_is_about_another_build(not_found: str) -> None:
    (problem,) = index_probe.probe_all([(not_found, True)], timeout=5)
    line = index_probe.what_it_changes(problem, ["https://pypi.org/simple"])
    assert line.startswith(f"warning: the extra index {not_found} answers HTTP 404 Not Found")
    assert "torch's cu126 build comes from it" in line
    assert "not the cu126 one" in line


def test_a_real_file_gets_an_answer_with_the_unchecked_named_and_the_index_said(
    tmp_path: Path, not_found: str
) -> None:
    index = local_index(tmp_path / "index", FakeTorch(version="2.4.1"))
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"torch==2.4.1\n{DIFFUSERS}\n--extra-index-url {not_found}\n")
    result = run(
        "--python",
        "3.11",
        "--index-url",
        index,
        "--cache-dir",
        str(tmp_path / "c"),
        "--no-verify",
        "--",
        "-r",
        str(requirements),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"not checked: {DIFFUSERS} (requirements.txt:2): a VCS requirement" in result.stdout
    said = f"warning: the extra index {not_found} answers HTTP 404 Not Found"
    assert said in result.stdout
    assert result.stderr.startswith(f"torchguard: {said}")  # at once, not only at the end
    head = result.stdout.splitlines()[0]
    assert "import torch succeeds" in head and "(1 requirement(s) not checked: named below)" in head
    assert "(without 1 index(es) that failed: see below)" in head


def test_a_local_build_from_an_index_that_fails_is_named_and_its_release_checked(
    tmp_path: Path, not_found: str
) -> None:
    """kohya_ss's requirements_pytorch_windows.txt (torch==2.7.0+cu128 from download.pytorch.org,
    out of reach): the +cu128 pins are named as not checked, their release judged instead."""
    index = local_index(tmp_path / "index", FakeTorch(version="2.4.1"))
    requirements = tmp_path / "requirements_pytorch_windows.txt"
    requirements.write_text(
        f"--extra-index-url {not_found}\n\ntorch==2.4.1+cu126\nwinhelper==1.0\n"
    )
    result = run(
        "--python",
        "3.11",
        "--index-url",
        index,
        "--cache-dir",
        str(tmp_path / "c"),
        "--no-verify",
        "--json",
        "--",
        "-r",
        str(requirements),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    import json

    check = json.loads(result.stdout)["check"]
    assert [u["requirement"] for u in check["unchecked"]] == ["torch==2.4.1+cu126"]
    (unchecked,) = check["unchecked"]
    assert unchecked["where"] == "requirements_pytorch_windows.txt:3"
    assert unchecked["why"].startswith(
        f"a local build that only the index {not_found} can serve, which failed: its release "
        "(torch==2.4.1)"
    )
    assert [p["url"] for p in check["index_problems"]] == [not_found]
    assert result.stderr.startswith(f"torchguard: warning: the extra index {not_found}")


def test_only_a_pinned_local_build_is_replaced() -> None:
    from torchguard._frontends.requirement_input import RequirementInput

    given = RequirementInput(places={"torch==2.7.0+cu128": "r.txt:4"})
    kept, replaced = given.without_local_builds(
        [
            "torch==2.7.0+cu128",
            "torchvision===0.22.0+cu128 ; sys_platform == 'win32'",
            "xformers>=0.0.30",
            "numpy==1.26.4",
            "--extra-index-url",
            "https://pypi.org/simple",
        ],
        ["https://download.pytorch.org/whl/cu128"],
    )
    assert kept == [
        "torch==2.7.0",
        "torchvision===0.22.0 ; sys_platform == 'win32'",
        "xformers>=0.0.30",
        "numpy==1.26.4",
        "--extra-index-url",
        "https://pypi.org/simple",
    ]
    assert [(u.requirement, u.where) for u in replaced] == [
        ("torch==2.7.0+cu128", "r.txt:4"),
        ("torchvision===0.22.0+cu128 ; sys_platform == 'win32'", "the command line"),
    ]


def test_a_fix_whose_index_cannot_be_reached_is_never_called_verified() -> None:
    """As with download.pytorch.org out of reach: pip would answer from PyPI, and "verified"
    would be about a build the fix does not install."""
    from torchguard._facts.vocab import Code
    from torchguard._frontends.verify import verify_fix
    from torchguard._report.findings import ERROR, Finding, RepairHint
    from torchguard._report.report import ImportOutcome, Report, TorchSummary

    command = "py -3.11 -m pip install torch==2.4.1 --index-url http://127.0.0.1:9/whl/cpu"
    broken = Report(
        findings=(
            Finding(Code.MISSING_DLL, ERROR, "libomp", hints=(RepairHint("fix", (command,)),)),
        )
    )
    fixed = Report(torch=TorchSummary("2.4.1", "site/torch"), import_torch=ImportOutcome(ok=True))
    ran: list[object] = []
    notes: list[str] = []
    result = verify_fix(["torch==2.4.0"], broken, notes, lambda r, i: ran.append(r) or fixed, [])
    assert result is not None and result["verified"] is False and ran == []
    assert notes[0].startswith(
        "fix (not verified: its index http://127.0.0.1:9/whl/cpu cannot be reached ("
    )
    assert notes[0].endswith(f"): {command}")


def test_the_fix_runs_the_pip_of_the_python_the_user_installs_into(tmp_path: Path) -> None:
    from torchguard._frontends.install_python import install_python

    portable = tmp_path / "ComfyUI_windows_portable"
    (portable / "python_embeded").mkdir(parents=True)
    (portable / "python_embeded" / "python.exe").write_bytes(b"MZ")
    (portable / "ComfyUI").mkdir()
    requirements = str(portable / "ComfyUI" / "requirements.txt")
    assert install_python("3.12", [requirements], cwd=str(portable)) == (
        "python_embeded\\python.exe"
    )
    assert install_python("3.12", [requirements], cwd=str(portable / "ComfyUI")) == (
        "..\\python_embeded\\python.exe"
    )
    elsewhere = str(tmp_path / "elsewhere")
    venv = {"VIRTUAL_ENV": "C:\\venv"}
    assert install_python(
        "3.12", [], cwd=elsewhere, environ=venv, windows=True, running="3.12"
    ) == ("python")
    # another Python version than the venv's, a Linux venv, or nothing known: py -3.X
    assert install_python(
        "3.11", [], cwd=elsewhere, environ=venv, windows=True, running="3.12"
    ) == ("py -3.11")
    assert install_python(
        "3.12", [], cwd=elsewhere, environ=venv, windows=False, running="3.12"
    ) == ("py -3.12")
    assert install_python("3.12", [], cwd=elsewhere, environ={}, windows=True, running="3.12") == (
        "py -3.12"
    )


BACKEND = '''\
"""A PEP 517 backend of a few lines: metadata only, as pip's dry run asks for."""
import os

METADATA = "Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n"


def prepare_metadata_for_build_wheel(directory, config_settings=None):
    info = "{name}-{version}.dist-info"
    os.makedirs(os.path.join(directory, info))
    with open(os.path.join(directory, info, "METADATA"), "w") as handle:
        handle.write(METADATA)
    return info


def get_requires_for_build_wheel(config_settings=None):
    return []
'''


def sdist(folder: Path, name: str, version: str, extra: dict[str, str]) -> None:
    """A real sdist in a ``file://`` index, building its metadata without any download."""
    import io
    import tarfile

    root = f"{name}-{version}"
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\n'
        'backend-path = ["."]\n',
        "backend.py": BACKEND.replace("{name}", name).replace("{version}", version),
        f"{name}.py": "",
        **extra,
    }
    project = folder / name
    project.mkdir(parents=True)
    filename = f"{root}.tar.gz"
    with tarfile.open(project / filename, "w:gz") as archive:
        for path, text in files.items():
            data = text.encode()
            member = tarfile.TarInfo(f"{root}/{path}")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    (project / "index.html").write_text(f'<a href="{filename}">{filename}</a>\n')


def test_an_sdist_only_release_is_judged_by_its_source(tmp_path: Path) -> None:
    """lycoris-lora 1.8.3's shape (Python only, no wheel): resolved from its source, the rest
    judged; a release whose source has C++ and a CUDAExtension is named as compiling."""
    index = local_index(tmp_path / "index", FakeTorch(version="2.4.1"))
    simple = tmp_path / "index" / "simple"
    sdist(simple, "purepkg", "1.8.3", {})
    sdist(
        simple,
        "nativepkg",
        "2.1.2",
        {
            "csrc/scatter.cpp": "int main() {}",
            "setup.py": "from torch.utils.cpp_extension import CUDAExtension\n"
            "setup(ext_modules=[CUDAExtension('x', ['csrc/scatter.cpp'])])\n",
        },
    )
    common = ["--python", "3.11", "--index-url", index, "--cache-dir", str(tmp_path / "c")]
    pure = run("torch==2.4.1", "purepkg==1.8.3", *common, "--no-verify")
    assert pure.returncode == 0, pure.stdout + pure.stderr
    assert "built from source: purepkg 1.8.3 publishes only purepkg-1.8.3.tar.gz" in pure.stdout
    native = run("torch==2.4.1", "nativepkg", *common, "--no-verify")
    assert native.returncode == 0, native.stdout + native.stderr
    assert (
        "not checked: nativepkg (the command line): publishes only nativepkg-2.1.2.tar.gz, which "
        "compiles native code on the machine that installs it (its source has "
        "csrc/scatter.cpp; its setup.py uses ext_modules"
    ) in native.stdout, native.stdout
    named = [line for line in native.stdout.splitlines() if line.startswith("not checked:")]
    assert len(named) == 1 and "(1 requirement(s) not checked" in native.stdout
    assert "it and what it depends on are not checked" in native.stdout
    # as a dependency: named, and resolved from its source so that the rest is judged
    helper = {
        "needsnative-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: needsnative\n"
        b"Version: 1.0\nRequires-Dist: nativepkg\n",
        "needsnative-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nTag: py3-none-any\n",
        "needsnative/__init__.py": b"",
    }
    folder = simple / "needsnative"
    folder.mkdir()
    write_wheel(folder / "needsnative-1.0-py3-none-any.whl", helper)
    (folder / "index.html").write_text(
        '<a href="needsnative-1.0-py3-none-any.whl">needsnative-1.0-py3-none-any.whl</a>\n'
    )
    indirect = run("torch==2.4.1", "needsnative", *common, "--no-verify")
    assert indirect.returncode == 0, indirect.stdout + indirect.stderr
    assert (
        "not checked: nativepkg 2.1.2 (a dependency): publishes only nativepkg-2.1.2.tar.gz"
    ) in indirect.stdout
    assert "what it depends on is resolved from its source and checked" in indirect.stdout


def test_pure_python_source_compiles_nothing() -> None:
    import io
    import tarfile

    from torchguard._frontends.sdist_source import native_reasons

    def archive(files: dict[str, str]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as opened:
            for path, text in files.items():
                member = tarfile.TarInfo(f"p-1.0/{path}")
                member.size = len(text.encode())
                opened.addfile(member, io.BytesIO(text.encode()))
        return buffer.getvalue()

    setup = "from setuptools import setup, find_packages\nsetup(packages=find_packages())\n"
    assert native_reasons(archive({"setup.py": setup, "p/__init__.py": ""}), "p-1.0.tar.gz") == []
    rust = '[build-system]\nbuild-backend = "maturin"\n'
    assert native_reasons(archive({"pyproject.toml": rust}), "p-1.0.tar.gz") == [
        "its build backend is maturin, which compiles"
    ]


def test_findings_of_one_cause_are_one_entry_with_the_rest_folded_under_it() -> None:
    """ai-toolkit's torchcodec: each libtorchcodec_coreN.dll misses its FFmpeg DLLs, one fix."""
    from torchguard._facts.vocab import Code
    from torchguard._frontends.check import Check
    from torchguard._frontends.check_text import render_check
    from torchguard._report.colour import PLAIN
    from torchguard._report.findings import ERROR, Finding, RepairHint
    from torchguard._report.report import ImportOutcome, Report, TorchSummary

    fix = RepairHint("install FFmpeg", ("winget install ffmpeg",))

    def missing(core: int, dll: str) -> Finding:
        importer = f"libtorchcodec_core{core}.dll"
        return Finding(
            Code.MISSING_DLL,
            ERROR,
            f"{dll} is missing; {importer} needs it",
            dll=importer,
            missing=dll,
            chain=(importer, dll),
            hints=(fix,),
            package="torchcodec",
        )

    other = Finding(
        Code.MISSING_DLL, ERROR, "x.dll is missing", missing="x.dll", package="xformers"
    )
    findings = (
        missing(4, "avutil-56.dll"),
        missing(4, "avcodec-58.dll"),
        other,
        missing(5, "avutil-57.dll"),
    )
    report = Report(
        findings=findings,
        torch=TorchSummary("2.12.1", "site/torch"),
        import_torch=ImportOutcome(ok=True),
    )
    text = render_check(Check(("torchcodec",), "3.11", False, (), (), report), PLAIN)
    assert text.count("error[missing-dll]") == 2
    assert (
        "  and 2 more of the same cause and fix: avcodec-58.dll (libtorchcodec_core4.dll), "
        "avutil-57.dll (libtorchcodec_core5.dll)"
    ) in text
    assert "4 error(s), 0 warning(s) from 2 cause(s)" in text


def test_one_bound_covers_every_resolution_a_source_only_release_costs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kohya_ss's fairscale: pip fails on it, check resolves again without it; the second run
    gets what is left of --resolve-timeout, not a fresh one, and none is left: timeout."""
    import io
    import tarfile
    import time as clock

    from packaging.version import Version

    from torchguard._frontends import check as check_module
    from torchguard._frontends.index_files import IndexFile
    from torchguard._frontends.pip_reasons import PipFailure
    from torchguard._frontends.requirement_input import RequirementInput

    source = tmp_path / "native-1.0.tar.gz"
    with tarfile.open(source, "w:gz") as archive:
        data = b"int main() {}"
        member = tarfile.TarInfo("native-1.0/csrc/x.cpp")
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    now = [1000.0]
    monkeypatch.setattr(clock, "monotonic", lambda: now[0])
    given: list[float] = []

    def pip(arguments: list[str], **options: object) -> object:
        given.append(float(options["timeout"]))  # type: ignore[arg-type]
        now[0] += 70  # pip worked 70 s before failing on the sdist-only release
        failure = PipFailure(["no wheel for native"])
        failure.sdist = (
            "native",
            IndexFile(
                source.name, Version("1.0"), False, frozenset(), frozenset(), source.as_uri()
            ),
        )
        raise failure

    monkeypatch.setattr(check_module, "resolve", pip)
    requirements = RequirementInput(arguments=["torch", "native"])
    with pytest.raises(PipFailure) as raised:
        check_module._resolve_from_sources(["torch", "native"], [], requirements, timeout=100.0)
    assert given == [100.0, 30.0]
    assert raised.value.kind == "timeout"
    assert raised.value.lines[0].startswith("pip did not finish resolving within 100 s")
    assert requirements.unchecked[0].requirement == "native"


def test_a_second_check_starts_from_what_the_first_found_out_about_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ai-toolkit's lycoris-lora: the first check pays a pip run that fails on the sdist-only
    release; the next one of the same input starts from its source and runs no failing pip."""
    from torchguard._frontends import resolve
    from torchguard._frontends.cli import main

    index = local_index(tmp_path / "index", FakeTorch(version="2.4.1"))
    sdist(tmp_path / "index" / "simple", "purepkg", "1.8.3", {})
    real = resolve.run_watched
    runs: list[bool] = []

    def counted(command: object, **options: object) -> object:
        done = real(command, **options)  # type: ignore[arg-type]
        runs.append(done.returncode == 0)
        return done

    monkeypatch.setattr(resolve, "run_watched", counted)
    options = ["--python", "3.11", "--index-url", index, "--cache-dir", str(tmp_path / "c")]
    for _ in range(2):
        assert main(["check", *options, "--no-verify", "torch==2.4.1", "purepkg==1.8.3"]) == 0
        assert "built from source: purepkg 1.8.3" in capsys.readouterr().out
    assert runs == [False, True]  # the second check: no pip run at all


def test_the_minute_lines_start_again_with_each_pip_run(capsys: pytest.CaptureFixture[str]) -> None:
    """Not a silent second pip run until its elapsed time passes the first one's last line."""
    from torchguard._frontends.check import _watcher
    from torchguard._frontends.progress import Progress

    show = _watcher(Progress(None))
    for elapsed in (30, 61, 121, 5, 62):
        show(float(elapsed), 1, "step")
    said = [line.split(": ")[2] for line in capsys.readouterr().err.splitlines()]
    assert said == ["61 s, 1 collected, now", "121 s, 1 collected, now", "62 s, 1 collected, now"]

"""``torchguard doctor --compile``: what torch.compile needs, as facts with the paths looked at.

The facts are one pure function (:func:`compile_facts`) shared with the ``compile-not-ready``
rules: Windows cases run here on fake trees (a set of paths), Linux ones on this machine."""

from __future__ import annotations

import json
import ntpath
import sys
from pathlib import Path

import pytest
from test_linux_hints import TORCH_291

from torchguard._frontends import compile_doctor
from torchguard._frontends.cli import main
from torchguard._rules.compile_facts import CompileInputs, Triton, compile_facts

EMBEDDED = "C:\\ComfyUI\\python_embeded"
SITE = ntpath.join(EMBEDDED, "Lib", "site-packages")
TCC = ntpath.join(SITE, "triton", "runtime", "tcc", "tcc.exe")


def windows(files: set[str], **kwargs: object) -> CompileInputs:
    options: dict[str, object] = {
        "windows": True,
        "python_version": (3, 12),
        "include_dir": ntpath.join(EMBEDDED, "Include"),
        "lib_homes": (EMBEDDED, EMBEDDED, EMBEDDED),
        "torch_version": "2.9.1+cu128",
        "triton": Triton("triton-windows", "3.5.1.post21", SITE),
        "is_file": files.__contains__,
        **kwargs,
    }
    return CompileInputs(**options)  # type: ignore[arg-type]


def test_an_embeddable_python_on_windows() -> None:
    facts = compile_facts(windows({TCC}))
    assert facts.compiler.found and facts.compiler.detail == f"bundled TinyCC {TCC}"
    assert not facts.header.found
    assert facts.header.looked_at == (f"{EMBEDDED}\\Include\\Python.h",)
    assert facts.library is not None and not facts.library.found
    assert facts.library.name == "python312.lib"
    assert facts.library.looked_at == (f"{EMBEDDED}\\libs\\python312.lib",)  # each home once
    assert [f.name for f in facts.missing_files] == ["Python.h", "python312.lib"]
    assert facts.triton.detail == "triton-windows 3.5.1.post21; pairs with torch 2.9.1+cu128"
    assert facts.pairing is not None and facts.pairing.pairs


def test_a_full_python_with_cl_on_path_and_a_triton_of_another_minor() -> None:
    files = {
        f"{EMBEDDED}\\Include\\Python.h",
        f"{EMBEDDED}\\libs\\python312t.lib",
        "C:\\BuildTools\\bin\\cl.exe",
    }
    facts = compile_facts(
        windows(
            files,
            free_threaded=True,
            path_dirs=("C:\\Windows", "C:\\BuildTools\\bin"),
            triton=Triton("triton-windows", "3.4.0.post20", SITE),
        )
    )
    assert facts.missing_files == () and facts.compiler.detail == "C:\\BuildTools\\bin\\cl.exe"
    assert facts.pairing is not None and not facts.pairing.pairs
    assert facts.pairing.spec == "triton-windows<3.6"
    assert "does NOT pair with torch 2.9.1+cu128" in facts.triton.detail
    lines = compile_doctor.render(facts, windows(files))
    assert lines[-1].endswith('-m pip install -U "triton-windows<3.6"')


@pytest.mark.parametrize(
    ("environ", "compiler"),
    [
        ({"cc": "C:\\tcc\\tcc.exe"}, "CC=C:\\tcc\\tcc.exe"),  # Windows names: any case
        ({"VCToolsInstallDir": "C:\\VS\\VC\\Tools\\MSVC\\14.44"}, "Visual Studio developer"),
        ({}, None),
    ],
)
def test_the_compiler_triton_windows_would_use(
    environ: dict[str, str], compiler: str | None
) -> None:
    facts = compile_facts(windows(set(), environ=environ))
    assert facts.compiler.found is (compiler is not None)
    if compiler is None:
        assert facts.compiler.looked_at[:2] == ("CC", "VCToolsInstallDir")
        assert TCC in facts.compiler.looked_at
    else:
        assert facts.compiler.detail.startswith(compiler)


def test_no_triton_on_windows_names_the_pairing_torch_wants() -> None:
    facts = compile_facts(windows(set(), triton=None))
    assert not facts.triton.found and facts.pairing is None
    assert "torch 2.9.1+cu128 pairs with triton-windows 3.5" in facts.triton.detail
    unknown = compile_facts(windows(set(), triton=None, torch_version="2.14.0"))
    assert "pairs with" not in unknown.triton.detail


def _fake_site(root: Path, triton: str | None) -> Path:
    site = root / "site"
    torch = site / "torch-2.9.1.dist-info"
    torch.mkdir(parents=True)
    (torch / "METADATA").write_text(TORCH_291)
    if triton is not None:
        info = site / f"triton-{triton}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: triton\nVersion: {triton}\n")
    return site


@pytest.mark.skipif(sys.platform == "win32", reason="the Linux questions of this process")
@pytest.mark.parametrize(("triton", "pairs"), [("3.4.0", False), ("3.5.1", True), (None, None)])
def test_this_linux_process_against_torchs_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, triton: str | None, pairs: bool | None
) -> None:
    monkeypatch.syspath_prepend(str(_fake_site(tmp_path, triton)))
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "gcc").write_text("")
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.delenv("CC", raising=False)
    asked = compile_doctor.live_inputs(windows=False)
    assert asked.torch_version == "2.9.1" and asked.triton_pin == "3.5.1"
    facts = compile_facts(asked)
    assert facts.compiler.found and facts.compiler.detail == str(tools / "gcc")
    assert facts.library is None  # Linux links no python3XY.lib
    assert (None if facts.pairing is None else facts.pairing.pairs) is pairs
    lines, data = compile_doctor.compile_section(asked)
    assert data["pairs"] is pairs
    if pairs is False:
        assert data["paired_triton"] == "triton==3.5.1"
        assert lines[-1].endswith('-m pip install "triton==3.5.1"')
    if triton is None:
        assert "torch 2.9.1 pins triton==3.5.1" in facts.triton.detail
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    missing = compile_facts(compile_doctor.live_inputs(windows=False))
    assert not missing.compiler.found and missing.compiler.looked_at[0] == "CC"


@pytest.mark.skipif(sys.platform == "win32", reason="doctor's Linux output")
def test_doctor_compile_prints_the_section_after_the_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plain = main(["doctor"])
    usual = capsys.readouterr().out
    assert main(["doctor", "--compile"]) == plain  # facts, never a verdict
    out = capsys.readouterr().out
    assert out.startswith(usual.rstrip("\n"))
    section = out[len(usual.rstrip("\n")) :].splitlines()
    assert (
        section[2]
        == f"torch.compile needs (this interpreter, Python {sys.version_info[0]}.{sys.version_info[1]}: {sys.executable}):"
    )
    names = [line.split(":")[0].split()[-1] for line in section[3:] if line[2:9].strip()]
    assert names == ["triton", "compiler", "Python.h"]
    assert all(line[2:9] in ("found  ", "MISSING") for line in section[3:] if line[2:9].strip())
    assert "torch.compile needs" not in usual


@pytest.mark.skipif(sys.platform == "win32", reason="doctor's Linux output")
def test_doctor_compile_json_has_a_compile_object(capsys: pytest.CaptureFixture[str]) -> None:
    plain = main(["doctor", "--json"])
    assert "compile" not in json.loads(capsys.readouterr().out)
    assert main(["doctor", "--compile", "--json"]) == plain
    data = json.loads(capsys.readouterr().out)["compile"]
    assert data["platform"] == "linux" and data["python"] == sys.executable
    assert [f["name"] for f in data["facts"]] == ["triton", "C compiler", "Python.h"]
    header = data["facts"][2]
    assert header["looked_at"][0].endswith("Python.h") and isinstance(header["found"], bool)

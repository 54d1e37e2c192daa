"""An offline scan of a Windows environment gives the verdict ``ensure()`` gives in it.

Each layout (python.org install, venv, conda environment, portable ``python_embeded``) is
written on disk below a folder standing for ``C:\\`` (as WSL's ``/mnt/c``), with PE files built
in memory. The live model is the :class:`~torchguard._platforms.windows.system.System` ``ensure()``
builds of itself there (every path its own, the interpreter as the process sees it); the
offline scan gets only the site-packages path, or a wheel and ``--python-dir``, and must
infer the rest: where python.exe's folder is, that conda's ``Library\\bin`` exists.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fakes import KERNEL, FakeTorch, write_wheel
from layouts import LAYOUTS, Places, host_of, live_model, write_layout
from pe_builder import DEFAULT_SYMBOL, build_pe

import torchguard
from torchguard._binary.cache import user_cache
from torchguard._frontends.pipeline import analyze
from torchguard._platforms.windows import environment

PYTHON = "3.11"
REGISTERED = b"__KMP_REGISTERED_LIB_"
HOOK = b"..\\compiler\\"


def python_folder(*extra: str) -> dict[str, bytes]:
    """python.exe's folder as python.org ships it (no msvcp140.dll), plus ``extra`` DLLs."""
    names = ["python311.dll", "python3.dll", "vcruntime140.dll", "vcruntime140_1.dll", *extra]
    files = {name: build_pe(list(KERNEL)) for name in names}
    files["python.exe"] = build_pe(["python311.dll", *KERNEL])
    return files


def conda_mkl() -> dict[str, bytes]:
    """conda's MKL and intel-openmp in ``Library\\bin``, owned by ``conda-meta`` records (no
    pip RECORD lists them): MKL's threading layer loads its own ``libiomp5md.dll``."""
    files = {
        "Library/bin/mkl_intel_thread.2.dll": build_pe(
            list(KERNEL), ["libiomp5md.dll"], strings=[HOOK]
        ),
        "Library/bin/libiomp5md.dll": build_pe(
            list(KERNEL),
            exports=[DEFAULT_SYMBOL, "__kmpc_fork_call", "omp_get_max_threads"],
            strings=[REGISTERED],
        ),
    }
    for package, version, name in (
        ("mkl", "2023.1.0", "Library/bin/mkl_intel_thread.2.dll"),
        ("intel-openmp", "2023.1.0", "Library/bin/libiomp5md.dll"),
    ):
        record = {"name": package, "version": version, "files": [name]}
        files[f"conda-meta/{package}-{version}-0.json"] = json.dumps(record).encode()
    return files


def torch_files() -> dict[str, bytes]:
    fake = FakeTorch()
    fake.extra["torch/lib/libiomp5md.dll"] = build_pe(
        list(KERNEL),
        exports=[DEFAULT_SYMBOL, "__kmpc_fork_call", "omp_get_max_threads"],
        strings=[REGISTERED],
    )
    return fake.files()


@pytest.fixture
def drive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder standing for ``C:\\``, mounted where WSL mounts the Windows drives."""
    monkeypatch.setattr(environment, "WSL_MOUNTS", str(tmp_path / "mnt"))
    folder = tmp_path / "mnt" / "c"
    folder.mkdir(parents=True)
    return folder


def verdict(report: torchguard.Report) -> list[dict[str, Any]]:
    return [finding.to_dict() for finding in report.findings]


def live(places: Places, drive: Path, system32: Path) -> torchguard.Report:
    system = live_model(places, PYTHON, drive, [system32])
    try:
        return analyze(system, cwd=places.cwd, cache=user_cache())
    finally:
        system.close()


def offline(targets: list[Path], system32: Path, **options: Any) -> torchguard.Report:
    return torchguard.scan(targets, system32=[system32], clean_windows=True, **options)


#: (layout, DLLs in python.exe's folder beyond python.org's, conda's Library\bin): what the
#: live import finds there decides the verdict (msvcp140.dll beside python.exe or not, an
#: MKL that brings its own OpenMP runtime).
CASES = {
    "plain": ("plain", (), False),
    "venv": ("venv", (), False),
    "embedded": ("embedded", ("msvcp140.dll",), False),
    "conda": ("conda", ("msvcp140.dll",), True),
    "conda-without-mkl": ("conda", ("msvcp140.dll",), False),
}


KINDS = {
    "plain": "a Python installation",
    "venv": "a venv",
    "embedded": "an embedded Python",
    "conda": "a conda environment",
}


def machine(drive: Path, case: str) -> tuple[Places, Path]:
    name, extra, mkl = CASES[case]
    places = write_layout(
        LAYOUTS[name],
        PYTHON,
        drive,
        python_folder(*extra),
        torch_files(),
        conda_mkl() if mkl else {},
    )
    return places, host_of(drive, places.install_site)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_site_packages_path_gets_the_live_verdict(tmp_path: Path, drive: Path, case: str) -> None:
    """``scan <env>\\Lib\\site-packages`` (as WSL sees it) = ``ensure()`` in that environment,
    finding for finding: messages, paths and hints included."""
    empty = tmp_path / "system32"
    empty.mkdir()
    places, site = machine(drive, case)
    expected = live(places, drive, empty)
    report = offline([site], empty)
    assert verdict(report) == verdict(expected)
    assert report.python["app_dir"] == places.app_dir
    assert report.python["executable"] == places.executable
    assert KINDS[CASES[case][0]] in report.python["environment"]


def test_the_cases_differ_where_the_environment_decides(tmp_path: Path, drive: Path) -> None:
    """The comparison above can fail: the live verdicts themselves depend on the layout."""
    empty = tmp_path / "system32"
    empty.mkdir()
    codes = {}
    for case in ("plain", "conda", "conda-without-mkl"):
        places, _ = machine(drive / case, case)
        codes[case] = [(f.code, f.severity) for f in live(places, drive / case, empty).findings]
    assert ("missing-dll", "error") in codes["plain"]
    assert codes["conda"] == [("openmp-conflict", "warning")]
    assert codes["conda-without-mkl"] == []


def test_a_copy_of_a_conda_environment_gets_the_same_findings(tmp_path: Path, drive: Path) -> None:
    """A copy (no Windows path known) keeps stand-in paths, and the same verdict."""
    empty = tmp_path / "system32"
    empty.mkdir()
    places, _ = machine(drive, "conda")
    expected = live(places, drive, empty)
    copy = tmp_path / "copy" / "ml"
    shutil.copytree(host_of(drive, places.prefix), copy)
    for target in (copy / "Lib" / "site-packages", copy):
        report = offline([target], empty)
        assert [(f.code, f.severity, f.package) for f in report.findings] == [
            (f.code, f.severity, f.package) for f in expected.findings
        ]
        (finding,) = report.findings
        assert "intel-openmp==2023.1.0" in finding.message
        assert "conda environment" in report.python["environment"]


def test_a_wheel_with_a_conda_root_as_python_dir_gets_the_live_verdict(
    tmp_path: Path, drive: Path
) -> None:
    """``scan torch.whl --python-dir <conda env>``: conda-meta and ``Library\\bin`` count."""
    empty = tmp_path / "system32"
    empty.mkdir()
    places, _ = machine(drive, "conda")
    expected = live(places, drive, empty)
    wheel = tmp_path / "torch-2.4.1+cpu-cp311-cp311-win_amd64.whl"
    write_wheel(wheel, torch_files())
    report = offline([wheel], empty, python_dir=host_of(drive, places.prefix))
    assert [(f.code, f.severity, f.package, f.path) for f in report.findings] == [
        (f.code, f.severity, f.package, f.path) for f in expected.findings
    ]


def test_a_venv_copy_whose_base_python_is_elsewhere_says_what_it_assumed(
    tmp_path: Path, drive: Path
) -> None:
    """A venv's python.exe runs from ``home`` (pyvenv.cfg): read there when this machine has
    it (WSL), assumed to be python.org's otherwise, and the report says which."""
    empty = tmp_path / "system32"
    empty.mkdir()
    places, site = machine(drive, "venv")
    seen = offline([site], empty)
    assert seen.python["app_dir"] == places.app_dir
    assert "not found here" not in seen.python["environment"]
    copy = tmp_path / "copy" / "venv"
    shutil.copytree(host_of(drive, places.prefix), copy)
    shutil.rmtree(host_of(drive, places.app_dir))
    report = offline([copy / "Lib" / "site-packages"], empty)
    assert report.python["app_dir"] == places.app_dir  # pyvenv.cfg's home, even unseen
    assert "not found here: python.org's DLLs assumed" in report.python["environment"]
    assert [f.code for f in report.findings] == [f.code for f in seen.findings]


def test_a_folder_of_packages_outside_any_environment_is_scanned_as_before(
    tmp_path: Path,
) -> None:
    site = FakeTorch().write(tmp_path / "site")
    report = torchguard.scan([site])
    assert report.python["app_dir"] == "C:\\Python" and "environment" not in report.python


def test_the_assumed_line_names_the_environment(
    tmp_path: Path, drive: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from torchguard._frontends.cli import main

    empty = tmp_path / "system32"
    empty.mkdir()
    places, site = machine(drive, "conda")
    status = main(["scan", str(site), "--system32", str(empty), "--clean-windows"])
    last = capsys.readouterr().out.rstrip("\n").splitlines()[-1]
    assert status == 0 and last.startswith("assumed: a clean Windows")
    assert f"a conda environment (conda-meta) at {places.prefix}" in last
    assert "PATH is not known offline" in last
    assert main(["scan", str(site), "--json", "--clean-windows"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["python"]["environment"].startswith("a conda environment")


def test_a_wheel_with_a_venv_as_python_dir_runs_from_its_home(tmp_path: Path, drive: Path) -> None:
    """``--python-dir <venv>``: python.exe's folder is pyvenv.cfg's home, read where it is."""
    empty = tmp_path / "system32"
    empty.mkdir()
    places, _ = machine(drive, "venv")
    expected = live(places, drive, empty)
    wheel = tmp_path / "torch-2.4.1+cpu-cp311-cp311-win_amd64.whl"
    write_wheel(wheel, torch_files())
    report = offline([wheel], empty, python_dir=host_of(drive, places.prefix))
    assert report.python["app_dir"] == places.app_dir and "a venv" in report.python["environment"]
    assert [(f.code, f.severity, f.missing) for f in report.findings] == [
        (f.code, f.severity, f.missing) for f in expected.findings
    ]
    assert ("missing-dll", "error", "MSVCP140.dll") in [
        (f.code, f.severity, f.missing) for f in report.findings
    ]


def test_a_venv_with_the_system_site_finds_torch_in_its_base(tmp_path: Path, drive: Path) -> None:
    """``include-system-site-packages = true``: the base's site-packages follow the venv's, as
    on ``sys.path``; torch installed there is the one ``import torch`` finds."""
    import dataclasses

    empty = tmp_path / "system32"
    empty.mkdir()
    places = write_layout(LAYOUTS["venv"], PYTHON, drive, python_folder("msvcp140.dll"), {})
    base_site = f"{places.app_dir}\\Lib\\site-packages"
    for name, data in torch_files().items():
        path = host_of(drive, base_site).joinpath(*name.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    config = host_of(drive, places.prefix) / "pyvenv.cfg"
    config.write_text(config.read_text().replace("= false", "= true"))
    places = dataclasses.replace(places, site_dirs=(*places.site_dirs, base_site))
    expected = live(places, drive, empty)
    assert expected.torch is not None
    report = offline([host_of(drive, places.install_site)], empty)
    assert report.torch is not None and report.torch.location == expected.torch.location
    assert verdict(report) == verdict(expected)
    assert "include-system-site-packages" in report.python["environment"]


@pytest.mark.parametrize(
    "config",
    ["home = ..\\elsewhere\n", "home = /usr/bin\n", "", "\0\xff" * 40000, "home\n= = =\n"],
)
def test_a_damaged_pyvenv_cfg_leaves_python_exes_folder_assumed(
    tmp_path: Path, config: str
) -> None:
    """Anything but a Windows folder in ``home`` is unknown, never a path to read."""
    venv = tmp_path / "venv"
    FakeTorch().write(venv / "Lib" / "site-packages")
    (venv / "pyvenv.cfg").write_text(config, encoding="utf-8", errors="surrogateescape")
    report = torchguard.scan([venv / "Lib" / "site-packages"])
    assert report.ok and report.torch is not None
    assert "not found here: python.org's DLLs assumed" in report.python["environment"]
    assert report.python["app_dir"] == "C:\\Python"

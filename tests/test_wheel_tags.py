"""wheel-tag-mismatch: a binary distribution whose WHEEL tags do not fit the interpreter
(another CPython, the GIL build under a free-threaded one, another platform) is said as such."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeTorch, companion, write_tree
from pe_builder import build_pe

import torchguard
from torchguard._facts.vocab import Code
from torchguard._facts.wheel_tags import Interpreter, misfit, platform_tag, wheel_tags
from torchguard._platforms.linux.wheel_dists import site_wheels
from torchguard._rules.wheel_tags import tag_findings

WIN311 = Interpreter((3, 11), False, "win_amd64")
WIN313T = Interpreter((3, 13), True, "win_amd64")
ARM313 = Interpreter((3, 13), False, "win_arm64")
LINUX313T = Interpreter((3, 13), True, "linux_x86_64")


def test_compressed_tags_expand_and_junk_is_ignored() -> None:
    text = "Wheel-Version: 1.0\nTag: cp311.cp312-abi3-win_amd64\nTag: broken\nRoot-Is-Purelib: x\n"
    assert wheel_tags(text) == ("cp311-abi3-win_amd64", "cp312-abi3-win_amd64")
    assert wheel_tags(None) == () and wheel_tags("\x00garbage") == ()


@pytest.mark.parametrize(
    ("tag", "interpreter"),
    [
        ("cp313t-cp313t-win_amd64", WIN313T),
        ("cp311-cp311-win_amd64", WIN311),
        ("cp39-abi3-win_amd64", WIN311),
        ("py3-none-any", WIN313T),
        ("py3-none-win_amd64", WIN311),
        ("cp313t-cp313t-manylinux_2_28_x86_64", LINUX313T),
        ("py3-none-manylinux2014_x86_64", LINUX313T),
        ("pp310-pypy310_pp73-win_amd64", WIN311),  # another implementation: not judged
    ],
)
def test_tags_that_fit(tag: str, interpreter: Interpreter) -> None:
    assert misfit((tag,), interpreter) is None


@pytest.mark.parametrize(
    ("tag", "interpreter", "said"),
    [
        ("cp313-cp313-win_amd64", WIN313T, "with the GIL"),
        ("cp313t-cp313t-win_amd64", Interpreter((3, 13), False, "win_amd64"), "free-threaded"),
        ("cp39-abi3-win_amd64", WIN313T, "stable ABI"),
        ("cp312-cp312-win_amd64", WIN311, "CPython 3.12"),
        ("cp312-abi3-win_amd64", WIN311, "3.12 or newer"),
        ("py3-none-win_amd64", ARM313, "not win_arm64"),
        (
            "cp313-cp313-manylinux_2_28_aarch64",
            Interpreter((3, 13), False, "linux_x86_64"),
            "aarch64",
        ),
        ("cp313-cp313-win_amd64", Interpreter((3, 13), False, "linux_x86_64"), "win_amd64"),
    ],
)
def test_tags_that_do_not_fit(tag: str, interpreter: Interpreter, said: str) -> None:
    reason = misfit((tag,), interpreter)
    assert reason is not None and said in reason


def test_one_fitting_tag_is_enough_and_the_nearest_reason_is_given() -> None:
    assert misfit(("cp312-cp312-win_amd64", "cp311-cp311-win_amd64"), WIN311) is None
    reason = misfit(("cp313-cp313-manylinux_2_28_x86_64", "cp313-cp313-win_amd64"), WIN313T)
    assert reason is not None and "GIL" in reason  # not "built for manylinux"


def test_platform_tags() -> None:
    assert platform_tag("Windows", "AMD64") == "win_amd64"
    assert platform_tag("Windows", "ARM64") == "win_arm64"
    assert platform_tag("Linux", "x86_64") == "linux_x86_64"


def _extension(name: str, version: str, tag: str) -> dict[str, bytes]:
    files = {
        f"{name}/__init__.py": b"",
        f"{name}/_core.{tag.split('-')[0]}-win_amd64.pyd": build_pe(["KERNEL32.dll"]),
    }
    out = companion(name, version, files, {})
    out[f"{name}-{version}.dist-info/WHEEL"] = f"Wheel-Version: 1.0\nTag: {tag}\n".encode()
    return out


def test_a_scan_names_a_package_built_for_another_python(tmp_path: Path, runtime_dir: Path) -> None:
    site = FakeTorch().write(tmp_path / "site")  # torch for cp311: the Python is 3.11
    write_tree(site, _extension("fastext", "1.0", "cp312-cp312-win_amd64"))
    write_tree(site, _extension("goodext", "1.0", "cp311-cp311-win_amd64"))
    report = torchguard.scan([site], system32=[runtime_dir])
    found = [f for f in report.findings if f.code == Code.WHEEL_TAG_MISMATCH]
    assert [f.package for f in found] == ["fastext"], [(f.code, f.message) for f in found]
    assert not found[0].is_error
    assert "CPython 3.12" in found[0].message and "CPython 3.11" in found[0].message
    assert "pip install --force-reinstall fastext" in found[0].hints[0].commands[0]


def test_a_free_threaded_torch_beside_a_gil_extension(tmp_path: Path, runtime_dir: Path) -> None:
    torch = FakeTorch(version="2.6.0+cpu", python_tag="cp313t")
    torch.graph["torch_python.dll"] = tuple(
        "python313t.dll" if n == "python311.dll" else n for n in torch.graph["torch_python.dll"]
    )
    site = torch.write(tmp_path / "site")
    write_tree(site, _extension("gilext", "2.0", "cp313-cp313-win_amd64"))
    report = torchguard.scan([site], system32=[runtime_dir])
    found = [f for f in report.findings if f.code == Code.WHEEL_TAG_MISMATCH]
    assert [f.package for f in found] == ["gilext"]
    assert "free-threaded" in found[0].message and "cp313t" in found[0].message
    assert len(found[0].hints) == 2 and "py -3.13" in found[0].hints[1].commands[0]
    assert report.import_torch is not None and report.import_torch.ok


def test_linux_site_wheels_of_a_free_threaded_python(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.13t" / "site-packages"
    for name, tag in (
        ("torch-2.6.0", "cp313-cp313-manylinux_2_28_x86_64"),
        ("six-1.16.0", "py2.py3-none-any"),
    ):
        info = site / f"{name}.dist-info"
        info.mkdir(parents=True)
        (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: {tag}\n")
    (site / "broken-1.0.dist-info").mkdir()  # no WHEEL: nothing to judge
    found = list(
        tag_findings(site_wheels([str(site), str(site), str(tmp_path)]), LINUX313T, "python3.13t")
    )
    assert [(f.package, f.code) for f in found] == [(None, Code.WHEEL_TAG_MISMATCH)]
    assert (
        "torch 2.6.0" in found[0].message and "python3.13 -m pip" in found[0].hints[1].commands[0]
    )


def test_a_warm_linux_run_reads_no_wheel_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchguard._frontends.pipeline import linux as pipeline
    from torchguard._platforms.linux.cache import LinuxCache
    from torchguard._platforms.linux.files import PosixFiles
    from torchguard._platforms.linux.simulate import LinuxImport
    from torchguard._platforms.linux.system import LinuxSystem
    from torchguard._report.findings import Finding
    from torchguard._rules import linux_wheel_tags
    from torchguard._rules.linux_context import LinuxContext
    from torchguard._rules.linux_hints import LinuxHints

    site = tmp_path / "site-packages"
    info = site / "torch-2.6.0.dist-info"
    info.mkdir(parents=True)
    (info / "WHEEL").write_text("Tag: cp313-cp313-manylinux_2_28_x86_64\n")
    system = LinuxSystem(
        site_dirs=(str(site),),
        torch_package_dir=None,
        live=True,
        python_version=(3, 13),
        free_threaded=True,
        executable="/usr/bin/python3.13t",
    )
    cache = LinuxCache(tmp_path / "cache")

    def judged() -> list[Finding]:
        """The pipeline reads the rows (kept per folder state); the Linux rule judges them."""
        context = LinuxContext(
            LinuxImport((), None),
            LinuxHints(torch_version="2.6.0"),
            "2.6.0",
            python_cmd="python3.13t",
            wheel_tags=pipeline._wheel_tags(system, PosixFiles(), cache),
        )
        return list(linux_wheel_tags.check(context))

    cold = judged()
    assert [f.code for f in cold] == [Code.WHEEL_TAG_MISMATCH]
    assert "python3.13t -m pip" in cold[0].hints[0].commands[0]

    def unread(folder: str) -> list[tuple[str, str, str | None]]:
        raise AssertionError(f"{folder} read again")

    monkeypatch.setattr(pipeline, "folder_wheels", unread)
    assert judged() == cold
    fixed = site / "torch-2.6.0.dist-info"
    (fixed / "WHEEL").write_text("Tag: cp313-cp313t-manylinux_2_28_x86_64\n")
    (site / "six-1.0.dist-info").mkdir()  # an install changes the folder: read again
    monkeypatch.undo()
    assert judged() == []


def test_each_wheel_text_is_judged_as_itself() -> None:
    """Distributions sharing a WHEEL text share one verdict; each other text gets its own,
    whatever came before it."""
    fits, old, other = "Tag: cp311-cp311-win_amd64", "Tag: cp310-cp310-win_amd64", "Tag: x"
    dists = [
        ("a", "1", fits),
        ("b", "1", old),
        ("c", "1", fits),
        ("d", "1", None),
        ("e", "1", old),
        ("f", "1", "Tag: cp311-cp311-linux_x86_64"),
        ("g", "1", other),
    ]
    interpreter = Interpreter((3, 11), False, platform_tag("windows", "amd64"))
    found = list(tag_findings(iter(dists), interpreter, "py -3.11"))
    assert [f.package for f in found] == ["b", "e", "f"]
    assert "CPython 3.10" in found[1].message and "linux_x86_64" in found[2].message
    alone = [list(tag_findings([dist], interpreter, "py -3.11")) for dist in dists]
    assert found == [f for each in alone for f in each]

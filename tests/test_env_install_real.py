"""`torchguard pip install` and `check --env` on real venvs with real pip (Linux).

Two venvs share the Linux tier's torch 2.13.0+cpu install (``conftest.cpu_torch_site``,
hard-linked in, so making a venv costs seconds and the session's copy is never written), one
with torchvision 0.28.0 (which pins ``torch==2.13.0``). pip resolves offline from the
machine's wheel folders (torch 2.14.1, its CUDA 13 wheels, torchvision 0.28.0/0.29.1) plus
``cuda-bindings``, downloaded once into the Linux tier's cache. Each case runs the real
front door in a child process: pip's own dry run, the overlay, the scan, and pip itself when
the set is harmless.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.realwheel,
    pytest.mark.linux,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux venv"),
]

CUDA_BINDINGS = "cuda-bindings==13.5.0"
"""torch 2.14.1's one dependency the machine's folders lack (``<14,>=13.0.3``)."""


@pytest.fixture(scope="module")
def pip_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pip configuration that resolves from the disk only (no index)."""
    from linux_realloader import CACHE, LOCAL_WHEELS
    from realwheels import build_once, download

    extra = build_once(
        CACHE / "wheels-env-guard", lambda folder: download(CUDA_BINDINGS, folder, platform=None)
    )
    folders = [str(f) for f in (*LOCAL_WHEELS, extra) if f.is_dir()]
    config = tmp_path_factory.mktemp("pipconf") / "pip.conf"
    config.write_text(
        "[global]\nno-index = true\ndisable-pip-version-check = true\n"
        f"find-links = {' '.join(folders)}\n"
    )
    return config


def _make_venv(where: Path, site_source: Path) -> Path:
    """A venv whose site-packages holds ``site_source``'s files (hard links) and this
    interpreter's pip (a symlink: the venv's pip is the one that resolves)."""
    import pip

    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site = where / "lib" / version / "site-packages"
    pip_dir = Path(pip.__file__).parent
    os.symlink(pip_dir, site / "pip")
    for info in pip_dir.parent.glob(f"pip-{pip.__version__}.dist-info"):
        os.symlink(info, site / info.name)

    def link(source: str, target: str) -> None:
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)

    shutil.copytree(site_source, site, copy_function=link, dirs_exist_ok=True, symlinks=True)
    return where / "bin" / "python"


def _environ(config: Path) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**kept, "PIP_CONFIG_FILE": str(config), "NO_COLOR": "1"}


def _torchguard(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchguard", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=_environ(config),
    )


def _listing(python: Path) -> list[str]:
    site = next(python.parent.parent.glob("lib/python3*/site-packages"))
    return sorted(n for n in os.listdir(site))


@pytest.fixture(scope="module")
def torch_venv(cpu_torch_site: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make_venv(tmp_path_factory.mktemp("guard") / "torch", cpu_torch_site)


@pytest.fixture(scope="module")
def vision_venv(
    cpu_torch_site: Path, tmp_path_factory: pytest.TempPathFactory, pip_config: Path
) -> Iterator[Path]:
    python = _make_venv(tmp_path_factory.mktemp("guard") / "vision", cpu_torch_site)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "torchvision==0.28.0"],
        check=True,
        env=_environ(pip_config),
        timeout=600,
    )
    yield python


def test_a_harmless_set_passes_and_installs(torch_venv: Path, pip_config: Path) -> None:
    before = _listing(torch_venv)
    done = _torchguard(pip_config, "pip", "install", "--python", str(torch_venv), "six")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "six 1.17.0 (new)" in done.stdout
    assert "nothing that works today would break" in done.stdout
    after = _listing(torch_venv)
    assert "six.py" not in before and "six.py" in after
    assert set(before) < set(after)  # torch's files untouched, six added


def test_torch_pulled_in_by_torchvision_is_refused_with_a_judged_alternative(
    torch_venv: Path, pip_config: Path
) -> None:
    before = _listing(torch_venv)
    done = _torchguard(
        pip_config, "pip", "install", "--json", "--python", str(torch_venv), "torchvision==0.29.1"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert document["ran_pip"] is False
    check = document["check"]
    assert check["torch"] == {
        "before": {"version": "2.13.0+cpu", "cuda": None},
        "after": {"version": "2.14.1", "cuda": "13.0"},
    }
    (replaced,) = [b for b in check["breaks"] if b["code"] == "torch-replaced"]
    assert "torchvision 0.29.1 requires torch>=2.14.0" in replaced["message"]
    # PyPI's torchvision 0.28.0 is a CUDA build: keeping torch with a constraint resolves, but
    # the scan of that set finds torchvision's _C.so needing libc10_cuda.so, so it is not offered
    tried = "\n".join(check["notes"])
    assert "`pip install torchvision -c " in tried and "would still break: [missing-dll]" in tried
    assert "libc10_cuda.so" in tried
    # the build's own index is offered; resolved and judged only where it can be reached
    alternative = check["alternatives"][0]
    assert alternative["arguments"][:2] == ["torchvision", "-c"]
    assert Path(alternative["arguments"][2]).read_text() == "torch==2.13.0+cpu\n"
    assert alternative["arguments"][3:] == [
        "--extra-index-url",
        "https://download.pytorch.org/whl/cpu",
    ]
    assert alternative["resolved"] or "cannot be reached from here" in alternative["why"]
    assert _listing(torch_venv) == before


def test_torch_upgrade_under_a_torchvision_pin_is_refused(
    vision_venv: Path, pip_config: Path
) -> None:
    before = _listing(vision_venv)
    # check --env without the safer command: that one costs a second resolution of the 3 GB
    # CUDA set (the unit tests and the case above cover it)
    done = _torchguard(
        pip_config, "check", "--env", "--no-verify", "--python", str(vision_venv), "torch==2.14.1"
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "torch 2.13.0+cpu -> 2.14.1 (upgrade)" in done.stdout
    assert (
        "[left-behind] torchvision 0.28.0 requires torch==2.13.0, but torch would become 2.14.1"
        in done.stdout
    )
    assert (
        "import torch after the install: works (read from the wheels); import torchvision fails"
        in done.stdout
    )
    assert "[missing-symbol] import torchvision would fail: " in done.stdout
    assert "instead" not in done.stdout
    assert _listing(vision_venv) == before

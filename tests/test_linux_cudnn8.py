"""cuDNN 8's late loads, on the real ``libcudnn.so.8`` of nvidia-cudnn-cu12 8.9.2.26.

torch <= 2.2 ships with cuDNN 8, whose dispatcher keeps its six sub-libraries as exact names
(``libcudnn_ops_infer.so.8`` ...) and ``dlopen``s them at the first call. Only the 150 kB
dispatcher is kept: the 730 MB wheel is downloaded once with pip into a temporary folder, the
one member is cached under ``~/.cache/torchguard-ci/elf-wheels`` (keyed by version) and the
wheel is deleted. The real dispatcher is the judge of its own late load: called with ctypes
(no GPU needed), it loads ``libcudnn_ops_infer.so.8`` by name and, found nowhere, prints
"Could not load library ..." and aborts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from elf_members import cached_member
from linux_elf import write_so
from test_linux_import import analyze, torch_site

from torchguard._binary.elf.strings import read_dlopen_facts

pytestmark = [
    pytest.mark.linux,
    pytest.mark.realwheel,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the judge is glibc's ld.so"),
]

VERSION = "8.9.2.26"
MEMBER = "nvidia/cudnn/lib/libcudnn.so.8"
SUBS = (
    "libcudnn_adv_infer.so.8",
    "libcudnn_adv_train.so.8",
    "libcudnn_cnn_infer.so.8",
    "libcudnn_cnn_train.so.8",
    "libcudnn_ops_infer.so.8",
    "libcudnn_ops_train.so.8",
)


@pytest.fixture(scope="module")
def dispatcher() -> Path:
    """The real cuDNN 8.9.2 ``libcudnn.so.8`` (only that member is kept)."""
    return cached_member("nvidia-cudnn-cu12", VERSION, MEMBER, "manylinux1_x86_64")


def test_the_real_dispatcher_names_its_six_sub_libraries(dispatcher: Path) -> None:
    facts = read_dlopen_facts(dispatcher, "libcudnn")
    assert facts.stems == ()  # cuDNN 9's bare stems are cuDNN 9's
    assert tuple(n for n in facts.names if n != "libcudnn.so.8") == SUBS


def _cudnn8_site(root: Path, dispatcher: Path) -> Path:
    """:func:`torch_site` with torch 2.2's libtorch_cuda NEEDing the real ``libcudnn.so.8``
    and stand-ins for its sub-libraries beside it, as nvidia-cudnn-cu12 8.9 lays them out."""
    site = torch_site(root)
    lib = site / "nvidia" / "cudnn" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudnn.so.8").write_bytes(dispatcher.read_bytes())
    for name in SUBS:
        write_so(lib, name, runpath="$ORIGIN")
    rpath = (
        "$ORIGIN/../../nvidia/cuda_runtime/lib:$ORIGIN/../../nvidia/cusparse/lib:"
        "$ORIGIN/../../nvidia/cuda_nvrtc/lib:$ORIGIN/../../nvidia/cudnn/lib:$ORIGIN"
    )
    write_so(
        site / "torch" / "lib",
        "libtorch_cuda.so",
        needed=["libcusparse.so.12", "libcudart.so.12", "libcudnn.so.8"],
        rpath=rpath,
        undefined=["cudaMalloc"],
        defines=["_ZN3c104cuda6deviceEv"],
    )
    return site


def test_cudnn8_sub_libraries_are_replayed_from_the_real_dispatcher(
    dispatcher: Path, tmp_path: Path
) -> None:
    site = _cudnn8_site(tmp_path, dispatcher)
    assert analyze(site).findings == ()
    (site / "nvidia" / "cudnn" / "lib" / "libcudnn_ops_infer.so.8").unlink()
    report = analyze(site)
    assert report.errors == ()
    (warning,) = report.warnings
    assert warning.code == "missing-dll" and warning.chain == (
        "libcudnn.so.8",
        "libcudnn_ops_infer.so.8",
    )
    # the real dispatcher, called alone (no GPU needed), says the same and aborts
    code = (
        "import ctypes\n"
        f"lib = ctypes.CDLL({str(site / 'nvidia' / 'cudnn' / 'lib' / 'libcudnn.so.8')!r})\n"
        "lib.cudnnGetVersion()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    said = next(line for line in done.stderr.splitlines() if line.startswith("Could not load"))
    print(f"\nreal: rc={done.returncode} {said}")
    assert done.returncode != 0
    assert said in warning.message, (said, warning.message)

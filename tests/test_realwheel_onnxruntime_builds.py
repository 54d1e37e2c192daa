"""The onnxruntime-gpu build table and the Windows cuDNN version reader against the real
wheels on PyPI, read over range requests (a few hundred kilobytes, never the whole wheel) and
cached under ~/.cache/torchguard-ci/range-reads keyed by release.

- onnxruntime-gpu 1.22.0 and 1.25.0 (win_amd64): their ``build_and_package_info.py`` and
  ``version_info.py`` must say what :data:`BUILDS` says of the release;
- nvidia-cudnn-cu12 9.1.0.70 (win_amd64): its ``cudnn64_9.dll``'s version resource must say
  the wheel's version, read by :func:`cudnn_version` as torchguard reads torch's ``lib``.
"""

from __future__ import annotations

import pytest
from range_members import wheel_members as _members

from torchguard._facts.onnxruntime_builds import built_with, parse_build_info
from torchguard._platforms.windows.cudnn import cudnn_version
from torchguard._platforms.windows.tree import MemoryFile, WinTree

pytestmark = pytest.mark.realwheel

INFO = ("onnxruntime/capi/build_and_package_info.py", "onnxruntime/capi/version_info.py")


@pytest.mark.parametrize("release", ["1.22.0", "1.25.0"])
def test_the_wheels_say_what_the_table_says(release: str) -> None:
    members = _members("onnxruntime-gpu", release, INFO)
    assert set(members) == set(INFO)
    read = parse_build_info(*(data.decode() for data in members.values()))
    table = built_with(release)
    assert table is not None and read.cuda is not None
    assert read.cuda[:2] == table.cuda
    assert read.cudnn == table.cudnn


def test_the_cudnn_dll_says_its_wheels_version() -> None:
    member = "nvidia/cudnn/bin/cudnn64_9.dll"
    data = _members("nvidia-cudnn-cu12", "9.1.0.70", (member,))[member]
    tree = WinTree()
    folder = "C:\\site\\nvidia\\cudnn\\bin"
    tree.add_file(f"{folder}\\cudnn64_9.dll", MemoryFile(data, member))
    assert cudnn_version(tree, folder) == (9, 1, 0, 70)

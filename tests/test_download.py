"""``check``'s downloads and pip runs: a wheel cache that cannot take a wheel is said so, not
blamed on the network; a pip that never finishes is stopped."""

from __future__ import annotations

import errno
import io
from pathlib import Path
from typing import Any, ClassVar

import pytest

from torchguard._frontends import download
from torchguard._frontends.pip_reasons import PipFailure
from torchguard._frontends.progress import Progress
from torchguard._frontends.resolve import Planned

BODY = b"x" * 3000
ITEM = Planned("torch", "2.4.1", "torch-2.4.1-cp311-cp311-win_amd64.whl", "https://h/t.whl", None)


class _Response(io.BytesIO):
    headers: ClassVar[dict[str, str]] = {"Content-Length": str(len(BODY))}


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(download, "urlopen", lambda url, timeout: _Response(BODY))

    def no_pip(*args: Any) -> int:
        raise AssertionError("a cache failure must not be retried with pip")

    monkeypatch.setattr(download, "_with_pip", no_pip)


def _fetch(cache: Path) -> PipFailure:
    with pytest.raises(PipFailure) as caught:
        download.fetch([ITEM], str(cache), "3.11", Progress(None))
    return caught.value


def test_a_download_larger_than_the_free_space_is_refused_before_writing(
    served: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(download.shutil, "disk_usage", lambda path: type("U", (), {"free": 100}))
    failure = _fetch(tmp_path)
    assert failure.kind == "cache" and "3.0 kB needed, 100 B free" in failure.lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".torchguard-wheel-cache"]


def test_a_full_disk_while_writing_is_a_cache_failure(
    served: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Full(io.BytesIO):
        def write(self, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    real_open = open
    monkeypatch.setattr(
        download,
        "open",
        lambda path, mode="r", *a: Full() if mode == "wb" else real_open(path, mode, *a),
        raising=False,
    )
    failure = _fetch(tmp_path)
    assert failure.kind == "cache" and "No space left on device" in failure.lines[0]
    assert "--cache-dir" in failure.lines[1]
    assert not list(tmp_path.glob("*.whl"))


def test_a_download_with_room_lands_in_the_cache(served: None, tmp_path: Path) -> None:
    fetched = download.fetch([ITEM], str(tmp_path), "3.11", Progress(None))
    assert fetched.downloaded_bytes == len(BODY)
    assert (tmp_path / ITEM.filename).read_bytes() == BODY


def test_a_pip_that_never_finishes_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resolver that backtracks for hours (here: a pip that sleeps) is stopped and said so."""
    import sys
    import time

    from torchguard._frontends import pip_python, resolve

    slow = tmp_path / "slow_pip.py"
    slow.write_text("import time\ntime.sleep(60)\n", encoding="utf-8")
    interpreter = pip_python.PipInterpreter(sys.executable, str(slow))
    monkeypatch.setattr(resolve, "pip_interpreter", lambda: interpreter)
    started = time.monotonic()
    with pytest.raises(PipFailure) as caught:
        resolve.resolve(["torch==2.4.1"], python="3.11", timeout=1.0)
    assert time.monotonic() - started < 30
    assert caught.value.kind == "timeout" and "did not finish resolving within 1 s" in (
        caught.value.lines[0]
    )


def test_an_index_page_larger_than_any_real_one_is_not_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchguard._frontends import index_files

    folder = tmp_path / "simple" / "torch"
    folder.mkdir(parents=True)
    link = '<a href="torch-2.4.1-cp311-cp311-win_amd64.whl">t</a>\n'
    (folder / "index.html").write_text(link * 100, encoding="utf-8")
    index = (tmp_path / "simple").as_uri()
    files = index_files.project_files(index, "torch")
    assert files is not None and len(files) == 100
    monkeypatch.setattr(index_files, "PAGE_LIMIT", 50 * len(link), raising=False)
    assert index_files.project_page(index, "torch") is None

"""``check``'s downloads and pip runs: a wheel cache that cannot take a wheel is said so, not
blamed on the network; a pip that never finishes is stopped."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any, ClassVar

import pytest

from torchguard._frontends import download
from torchguard._frontends.pip_reasons import PipFailure
from torchguard._frontends.progress import Progress
from torchguard._frontends.resolve import Planned

BODY = b"x" * 3000
SHA = hashlib.sha256(BODY).hexdigest()
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
    assert (
        caught.value.kind == "timeout"
        and "did not finish resolving within 1 s" in (caught.value.lines[0])
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


HOSTILE_NAMES = [
    "torch-2.4.1-1\\..\\..\\x-cp311-cp311-win_amd64.whl",  # a build tag packaging accepts
    "..\\..\\evil-1.0-py3-none-any.whl",
    "../../evil-1.0-py3-none-any.whl",
    "a/../../b-1.0-py3-none-any.whl",  # %2F, once unquoted
    "..",
    ".",
    "C:evil-1.0-py3-none-any.whl",
    "\\\\server\\share\\x-1.0-py3-none-any.whl",
    "nul.x-1.0-py3-none-any.whl",
    "x" * 400 + "-1.0-py3-none-any.whl",
    ".torchguard-wheel-cache",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_cache_name_stays_in_the_cache_on_every_os(name: str) -> None:
    import ntpath
    import posixpath

    from torchguard._frontends.wheel_cache import cache_name, cache_path, confined

    derived = cache_name(name)
    assert confined(derived) and not derived.startswith(".") and len(derived) <= 200
    assert ntpath.dirname(ntpath.join("C:\\cache", derived)) == "C:\\cache"
    assert posixpath.dirname(posixpath.join("/cache", derived)) == "/cache"
    assert os.path.dirname(cache_path("/cache", name)) == "/cache"


def test_a_safe_name_is_kept_and_tags_survive_a_derived_one() -> None:
    from torchguard._frontends.wheel_cache import cache_name, confined

    for unsafe in ("..", ".", "a\\b.whl", "a/b.whl", "C:x.whl", "x.whl:stream", ""):
        assert not confined(unsafe), unsafe

    assert cache_name(ITEM.filename) == ITEM.filename
    derived = cache_name(HOSTILE_NAMES[0])
    assert derived.endswith("-2.4.1-cp311-cp311-win_amd64.whl") and derived.startswith("torch_")
    assert cache_name(HOSTILE_NAMES[1]) != cache_name(HOSTILE_NAMES[2])


@pytest.mark.parametrize(
    "segment",
    [
        "torch-2.4.1-1%5C..%5C..%5Cx-cp311-cp311-win_amd64.whl",
        "torch-2.4.1-1%2F..%2F..%2Fx-cp311-cp311-win_amd64.whl",
    ],
)
def test_a_hostile_url_downloads_into_the_cache_folder(
    served: None, tmp_path: Path, segment: str
) -> None:
    """The URL's last segment, unquoted (``%2F`` becomes ``/``, ``%5C`` ``\\``), is never the
    path: the wheel lands in the cache, under a derived name, and nothing outside it."""
    from torchguard._frontends.resolve import parse_report
    from torchguard._frontends.wheel_cache import confined

    url = f"https://h/{segment}"
    report = {"install": [{"download_info": {"url": url}, "metadata": {"name": "torch"}}]}
    (item,) = parse_report(json.dumps(report))
    assert "\\..\\" in item.filename or "/../" in item.filename
    cache = tmp_path / "deep" / "cache"
    fetched = download.fetch([item], str(cache), "3.11", Progress(None))
    (path,) = fetched.paths
    assert Path(path).parent == cache and Path(path).read_bytes() == BODY
    assert confined(Path(path).name)  # no separator of Windows either
    outside = [p for p in tmp_path.rglob("*") if cache not in (p, *p.parents)]
    assert outside == [tmp_path / "deep"]
    assert Path(path).name in (cache / ".torchguard-wheel-cache").read_text()


def _counting(monkeypatch: pytest.MonkeyPatch, body: bytes = BODY) -> list[str]:
    asked: list[str] = []

    def serve(url: str, timeout: float) -> _Response:
        asked.append(url)
        return _Response(body)

    monkeypatch.setattr(download, "urlopen", serve)
    return asked


def test_a_kept_wheel_is_reused_only_while_it_is_the_indexs_file(
    served: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchguard._frontends import wheel_cache

    item = Planned(ITEM.name, ITEM.version, ITEM.filename, ITEM.url, SHA)
    asked = _counting(monkeypatch)
    download.fetch([item], str(tmp_path), "3.11", Progress(None))
    assert len(asked) == 1
    # reused: the remembered digest answers for an unchanged file, nothing is hashed
    hashed: list[str] = []
    real_hash = wheel_cache.file_sha256
    monkeypatch.setattr(wheel_cache, "file_sha256", lambda p: hashed.append(p) or real_hash(p))
    fetched = download.fetch([item], str(tmp_path), "3.11", Progress(None))
    assert fetched.reused == 1 and len(asked) == 1 and hashed == []
    # the same bytes written again (a new mtime): hashed once more, still reused
    kept = tmp_path / item.filename
    kept.write_bytes(BODY)
    os.utime(kept, ns=(1, 1))
    fetched = download.fetch([item], str(tmp_path), "3.11", Progress(None))
    assert fetched.reused == 1 and len(asked) == 1 and hashed == [str(kept)]
    # changed behind check's back (same size): downloaded again, and the cache holds the index's
    kept.write_bytes(b"y" * len(BODY))
    os.utime(kept, ns=(1, 1))
    fetched = download.fetch([item], str(tmp_path), "3.11", Progress(None))
    assert fetched.reused == 0 and len(asked) == 2 and kept.read_bytes() == BODY


def test_a_users_own_wheel_that_differs_is_never_replaced(
    served: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    item = Planned(ITEM.name, ITEM.version, ITEM.filename, ITEM.url, SHA)
    mine = tmp_path / item.filename
    mine.write_bytes(b"my own build")
    asked = _counting(monkeypatch)
    with pytest.raises(PipFailure) as caught:
        download.fetch([item], str(tmp_path), "3.11", Progress(None))
    assert caught.value.kind == "cache" and "left as it is" in caught.value.lines[0]
    assert mine.read_bytes() == b"my own build" and asked == []
    mine.write_bytes(BODY)  # the index's file after all: reused
    assert download.fetch([item], str(tmp_path), "3.11", Progress(None)).reused == 1

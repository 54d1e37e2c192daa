"""The recommended build's kernels read from its Linux wheel over HTTP range requests.

A local HTTP server stands for the indexes (PEP 691 JSON like PyPI, PEP 503 HTML like
download.pytorch.org) and answers byte ranges; the wheels are made here, so each test knows
what the reading must find and how much of the wheel it may fetch.
"""

from __future__ import annotations

import io
import json
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_fatbin import container, entry

from torchguard._facts.cuda_builds import RELEASES
from torchguard._facts.gpu_pick import Pick, pick
from torchguard._frontends.remote_kernels import find_linux_wheel, verify_kernels


def torch_wheel(cuda: str, archs: tuple[int, ...], filler: int = 0) -> bytes:
    """A wheel whose libtorch_cuda.so holds ``filler`` bytes, then one container per arch."""
    library = b"\x7fELF" + b"\x11" * filler
    library += b"".join(container(entry(2, a, bytes([a]) * 32)) for a in archs)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("torch/version.py", f"__version__ = 'x'\ncuda: Optional[str] = '{cuda}'\n")
        archive.writestr("torch/lib/libtorch_cuda.so", library)
    return buffer.getvalue()


class Index:
    """Files served by path; counts the bytes of wheels sent."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[bytes, str]] = {}
        self.sent = 0
        self.wheel_requests = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def add_pypi(self, name: str, data: bytes) -> None:
        self.files[f"/files/{name}"] = (data, "application/octet-stream")
        listing = {
            "files": [{"filename": name, "url": self.url(f"/files/{name}"), "size": len(data)}]
        }
        self.files["/pypi/torch/"] = (
            json.dumps(listing).encode(),
            "application/vnd.pypi.simple.v1+json",
        )

    def add_html(self, variant: str, name: str, data: bytes) -> None:
        quoted = name.replace("+", "%2B")
        self.files[f"/{variant}/{quoted}"] = (data, "application/octet-stream")
        page = f'<a href="/{variant}/{quoted}#sha256=00">{name}</a>'.encode()
        self.files[f"/{variant}/torch/"] = (page, "text/html")
        self.files[f"/{variant}/"] = (b"<a href='torch/'>torch</a>", "text/html")


@pytest.fixture
def index() -> Iterator[Index]:
    served = Index()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, body: bool) -> None:
            path = self.path.split("#", 1)[0]
            if path not in served.files:
                self.send_error(404)
                return
            data, kind = served.files[path]
            wanted = self.headers.get("Range")
            status = 200
            if wanted:
                first, last = (int(p) for p in wanted.split("=")[1].split("-"))
                data = data[first : last + 1]
                status = 206
            if kind == "application/octet-stream" and body:
                served.sent += len(data)
                served.wheel_requests += 1
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer(True)

        def do_HEAD(self) -> None:
            self._answer(False)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.port = server.server_address[1]  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served
    server.shutdown()
    server.server_close()


def chosen(series: tuple[int, int], capability: tuple[int, int]) -> Pick:
    found = pick([capability], releases=[r for r in RELEASES if r.series == series])
    assert found is not None
    return found


def test_a_wheel_of_the_recommended_build_verifies_its_kernels(index: Index, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ada = (8, 9)
    recommended = chosen((2, 15), ada)
    assert recommended.label == "2.15.0+cu132"
    index.add_pypi(
        "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        torch_wheel("13.2", (75, 80, 86, 90, 100, 120)),
    )
    result = verify_kernels(
        recommended,
        [ada],
        "pip install torch==2.15.0",
        cache=str(tmp_path),
        pypi=index.url("/pypi"),
        variant_index=index.url("/missing-cu132"),
    )
    assert result.verified, result.line
    assert result.line.startswith("fix (verified): pip install torch==2.15.0: ")
    assert "SASS sm_75, sm_80, sm_86, sm_90, sm_100, sm_120: it runs sm_89" in result.line
    before = index.wheel_requests
    again = verify_kernels(
        recommended,
        [ada],
        "pip install torch==2.15.0",
        cache=str(tmp_path),
        pypi=index.url("/pypi"),
        variant_index=index.url("/missing-cu132"),
    )
    assert again.verified and index.wheel_requests == before  # remembered per wheel


def test_a_wheel_without_the_gpus_kernels_contradicts_the_table(index: Index) -> None:
    blackwell = (12, 0)
    recommended = chosen((2, 15), blackwell)
    index.add_pypi(
        "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        torch_wheel("13.2", (75, 80, 86, 90)),
    )
    result = verify_kernels(
        recommended,
        [blackwell],
        "pip install x",
        pypi=index.url("/pypi"),
        variant_index=index.url("/nothing"),
    )
    assert not result.verified
    assert result.line.startswith("fix (not enough): pip install x: ")
    assert "no kernels for sm_120" in result.line


def test_another_variant_on_pypi_is_not_read_past_its_version_file(index: Index) -> None:
    """PyPI's 2.14.1 is the CUDA 13.0 build; a GTX 1080's pick is cu126: the fatbin after
    ``torch/version.py`` (a 4 MiB filler, then the containers) is never fetched."""
    pascal = (6, 1)
    recommended = chosen((2, 14), pascal)
    assert recommended.label == "2.14.1+cu126"
    data = torch_wheel("13.0", (75, 80), filler=4 << 20)
    index.add_pypi("torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", data)
    result = verify_kernels(
        recommended,
        [pascal],
        "pip install y",
        pypi=index.url("/pypi"),
        variant_index=index.url("/cu126-gone"),
    )
    assert not result.verified
    assert result.line.startswith("fix (not verified: its index ")
    assert "PyPI's Linux wheel of torch 2.14.1 is its CUDA 13.0 build, not the cu126 one" in (
        result.line
    )
    assert index.sent < (1 << 20) + 64 * 1024  # the central directory and version.py only


def test_the_variants_own_index_is_read_first(index: Index) -> None:
    pascal = (6, 1)
    recommended = chosen((2, 14), pascal)
    index.add_html(
        "cu126",
        "torch-2.14.1+cu126-cp311-cp311-manylinux_2_28_x86_64.whl",
        torch_wheel("12.6", (50, 60, 70, 75, 80, 86, 90)),
    )
    wheel = find_linux_wheel(index.url("/cu126"), "2.14.1", "cu126")
    assert wheel is not None and wheel.size > 0
    result = verify_kernels(
        recommended,
        [pascal],
        "pip install z",
        pypi=index.url("/nowhere"),
        variant_index=index.url("/cu126"),
    )
    assert result.verified, result.line
    assert "it runs sm_61" in result.line  # sm_60 SASS runs on sm_61


@pytest.mark.realwheel
def test_pypis_newest_wheel_verifies_an_ada_pick() -> None:
    """The real read: PyPI's 2.15.0 Linux wheel is its cu132 build; its first 64 containers
    carry sm_86 SASS, which an RTX 4090 (sm_89) runs. Remembered in the shared cache."""
    from realwheels import CACHE

    recommended = chosen((2, 15), (8, 9))
    result = verify_kernels(recommended, [(8, 9)], "pip install torch==2.15.0", cache=str(CACHE))
    assert result.verified, result.line
    assert "torch-2.15.0-" in result.line and "read from https://pypi.org/simple" in result.line

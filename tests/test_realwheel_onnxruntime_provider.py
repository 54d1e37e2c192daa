"""The CUDA 12 provider of a real onnxruntime-gpu Windows wheel (1.22.0, 215 MB) read without
downloading it whole: its ``onnxruntime_providers_cuda.dll`` member is inflated as a stream over
HTTP range requests only up to the end of the section holding its import directory (~50 MB
fetched, ~6 s), the import table read with pefile, and the names cached per release under
~/.cache/torchguard-ci/range-reads. The names torchguard's rules and preload replay use for a
CUDA 12 build must be the provider's own."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.parse
import urllib.request
import zipfile

import pefile
import pytest
from range_members import READS

from torchguard._facts.neighbours import cudnn_major, windows_cuda_major, windows_wheel
from torchguard._facts.onnxruntime_builds import built_with
from torchguard._facts.onnxruntime_preload import preload_list
from torchguard._frontends.remote_kernels import RangeFile

pytestmark = pytest.mark.realwheel

PROVIDER = "onnxruntime/capi/onnxruntime_providers_cuda.dll"
RELEASE = "1.22.0"


def provider_imports(release: str) -> list[str]:
    cached = READS / f"onnxruntime-gpu-{release}-provider-imports.json"
    if cached.exists():
        return list(json.loads(cached.read_text()))
    try:
        with urllib.request.urlopen("https://pypi.org/pypi/onnxruntime-gpu/json") as answer:
            base, listing = answer.geturl(), json.load(answer)
        wheel = next(
            f
            for f in listing["releases"][release]
            if f["filename"].endswith("win_amd64.whl") and "-cp311-" in f["filename"]
        )
        remote = RangeFile(urllib.parse.urljoin(base, wheel["url"]), wheel["size"])
        archive = zipfile.ZipFile(io.BufferedReader(remote, 1 << 22))
        with archive, archive.open(PROVIDER) as member:
            head = member.read(4096)
            headers = pefile.PE(data=head, fast_load=True)
            rva = headers.OPTIONAL_HEADER.DATA_DIRECTORY[1].VirtualAddress
            section = next(s for s in headers.sections if s.contains_rva(rva))
            end = section.PointerToRawData + section.SizeOfRawData
            data = head + member.read(end - len(head))
    except urllib.error.HTTPError:
        raise
    except OSError as error:
        pytest.skip(f"PyPI not reachable: {error}")
    image = pefile.PE(data=data, fast_load=True)
    image.parse_data_directories([pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"]])
    names = [entry.dll.decode() for entry in image.DIRECTORY_ENTRY_IMPORT]
    READS.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(names))
    return names


def test_the_cuda_12_provider_imports_the_names_the_rules_use() -> None:
    imports = [n.lower() for n in provider_imports(RELEASE)]
    cuda = [n for n in imports if n.startswith(("cublas", "cudart", "cufft", "cudnn", "curand"))]
    assert {"cublas64_12.dll", "cublaslt64_12.dll", "cudart64_12.dll", "cudnn64_9.dll"} <= set(
        cuda
    ), imports
    # the CUDA major the preload replay reads from the provider, and the build table's
    majors = {m for n in cuda if (m := windows_cuda_major(n)) is not None}
    build = built_with(RELEASE)
    assert build is not None and build.cuda is not None
    assert majors == {build.cuda[0]} == {12}
    assert {cudnn_major(n) for n in cuda if n.startswith("cudnn")} == {9}
    # every CUDA DLL it imports is one preload_dlls() loads for it (so a preload can help)
    preloaded = {name.lower() for _, name in preload_list(RELEASE, 12)}
    assert set(cuda) <= preloaded, set(cuda) - preloaded
    # and each has an NVIDIA Windows wheel for CUDA 12 to hint
    assert all(windows_wheel(n, "12") for n in cuda)

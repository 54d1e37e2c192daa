"""Repair hints fit the environment: pip or conda, CPU or CUDA, the Python that runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchguard._rules.hints import HintContext, for_corrupt
from torchguard._rules.hints_missing import for_missing


def commands(hints: tuple) -> list[str]:  # type: ignore[type-arg]
    return [c for h in hints for c in h.commands]


def test_cuda_build_reinstalls_from_its_own_index() -> None:
    ctx = HintContext(python_cmd="py -3.12", torch_version="2.5.1+cu121")
    (command,) = commands(for_missing("uv.dll", ctx, torch_owned=True))
    assert command.startswith("py -3.12 -m pip install --force-reinstall")
    assert "torch==2.5.1" in command
    assert command.endswith("--index-url https://download.pytorch.org/whl/cu121")


def test_plain_pypi_build_has_no_index_url() -> None:
    ctx = HintContext(torch_version="2.5.1")
    assert "--index-url" not in commands(for_missing("uv.dll", ctx, torch_owned=True))[0]


def test_conda_gets_conda_commands() -> None:
    ctx = HintContext(torch_version="2.4.0", conda=True)
    assert commands(for_missing("libomp140.x86_64.dll", ctx, torch_owned=False)) == [
        "conda install pytorch=2.4.1 -c pytorch"
    ]
    assert any(
        c.startswith("conda install") for c in commands(for_missing("msvcp140.dll", ctx, False))
    )


def test_never_a_dll_download_site() -> None:
    ctx = HintContext(torch_version="2.4.0+cpu")
    for name in (
        "libomp140.x86_64.dll",
        "msvcp140.dll",
        "weird.dll",
        "cudart64_12.dll",
        "nvcuda.dll",
    ):
        for hint in for_missing(name, ctx, torch_owned=False):
            assert hint.url is None or hint.url.startswith(
                (
                    "https://aka.ms/",
                    "https://github.com/pytorch/",
                    "https://www.nvidia.com/",
                    "https://pytorch.org/",
                )
            )


def test_one_index_url_even_when_the_hint_names_one() -> None:
    ctx = HintContext(torch_version="2.5.1+cu121")
    (command,) = commands(for_missing("nvcuda.dll", ctx, torch_owned=False))
    assert command.count("--index-url") == 1 and command.endswith("/whl/cpu")


def test_corrupt_file_of_a_companion_reinstalls_that_package() -> None:
    ctx = HintContext(torch_version="2.4.1+cpu")
    (command,) = commands(for_corrupt("mkl_core.1.dll", ctx, "mkl==2021.4.0"))
    assert command.endswith("--no-cache-dir mkl==2021.4.0")
    (command,) = commands(for_corrupt("c10.dll", ctx, "torch==2.4.1+cpu"))
    assert "torch==2.4.1" in command


def test_arch_hint_installs_the_same_python_version_in_64_bit() -> None:
    from torchguard._rules.hints import for_arch

    (hint,) = for_arch("asmjit.dll", HintContext(python_version=(3, 11)), "x86")
    assert hint.commands == (
        "winget install --id Python.Python.3.11 --exact",
        "py -3.11-64 -m pip install --force-reinstall torch",
    )


def test_reinstall_pins_the_installed_version_for_pip_and_conda() -> None:
    from torchguard._rules.hints import reinstall_torch

    assert reinstall_torch(HintContext(torch_version="2.4.1+cpu", conda=True), "s").commands == (
        "conda install --force-reinstall pytorch=2.4.1",
    )
    assert reinstall_torch(HintContext(conda=True), "s").commands == (
        "conda install --force-reinstall pytorch",
    )
    assert reinstall_torch(HintContext(), "s").commands == (
        "python -m pip install --force-reinstall --no-deps --no-cache-dir torch",
    )


@pytest.mark.parametrize(
    ("name", "owned", "expected"),
    [
        ("MSVCP140.dll", False, "Visual C++ 2015-2022 Redistributable"),
        ("libomp140.x86_64.dll", False, "LLVM OpenMP and is not redistributable"),
        ("python39.dll", False, "built for Python 3.9"),
        ("mkl_core.2.dll", True, "part of torch itself"),  # torch's own file: its install
        ("mkl_core.2.dll", False, "Intel MKL"),
        ("libiomp5md.dll", False, "Intel OpenMP"),
        ("nvcuda.dll", False, "NVIDIA display driver"),
        ("cudnn64_9.dll", False, "CUDA library"),
        ("helper.dll", False, "no installed package provides helper.dll"),
    ],
)
def test_each_missing_dll_gets_the_hint_of_the_first_case_that_applies(
    name: str, owned: bool, expected: str
) -> None:
    hints = for_missing(name, HintContext(torch_version="2.4.1+cu121"), owned)
    assert hints and expected in hints[0].summary


def test_torch_240_fix_pins_the_fixed_release_with_its_siblings_and_variant() -> None:
    """Not `--upgrade "torch>=2.4.1"` (the newest torch, which breaks a pinned torchvision):
    exactly 2.4.1, the torchvision/torchaudio made for it, from the build's own index."""
    ctx = HintContext(python_cmd="py -3.11", torch_version="2.4.0+cu121", siblings=("torchvision",))
    assert commands(for_missing("libomp140.x86_64.dll", ctx, torch_owned=False)) == [
        "py -3.11 -m pip install torch==2.4.1 torchvision==0.19.1 "
        "--index-url https://download.pytorch.org/whl/cu121"
    ]
    conda = HintContext(torch_version="2.4.0", conda=True, siblings=("torchvision", "torchaudio"))
    assert commands(for_missing("libomp140.x86_64.dll", conda, torch_owned=False)) == [
        "conda install pytorch=2.4.1 torchvision=0.19.1 torchaudio=2.4.1 -c pytorch"
    ]


def test_an_upgrade_of_torch_takes_its_installed_siblings_along() -> None:
    """libomp140 under another torch than 2.4.0, or Intel MKL missing: a newer torch, and the
    torchvision/torchaudio installed beside it upgraded in the same command."""
    ctx = HintContext(
        python_cmd="python", torch_version="2.5.1+cu124", siblings=("torchvision", "torchaudio")
    )
    upgrade = (
        "python -m pip install --upgrade torch torchvision torchaudio "
        "--index-url https://download.pytorch.org/whl/cu124"
    )
    assert commands(for_missing("libomp140.x86_64.dll", ctx, torch_owned=False)) == [upgrade]
    assert commands(for_missing("mkl_core.2.dll", ctx, torch_owned=False)) == [upgrade]
    alone = HintContext(python_cmd="python", torch_version="2.5.1")
    assert commands(for_missing("mkl_core.2.dll", alone, torch_owned=False)) == [
        "python -m pip install --upgrade torch"
    ]


def test_linux_reinstall_keeps_the_build_variant_and_its_index() -> None:
    from torchguard._rules.linux_hints import LinuxHints, reinstall

    (cpu,) = commands(reinstall(LinuxHints(torch_version="2.4.1+cpu"), None))
    assert cpu == (
        "python -m pip install --force-reinstall torch==2.4.1+cpu "
        "--index-url https://download.pytorch.org/whl/cpu"
    )
    (plain,) = commands(reinstall(LinuxHints(torch_version="2.4.1"), None))
    assert plain == "python -m pip install --force-reinstall torch==2.4.1"


def test_the_scan_passes_the_installed_siblings_to_the_fix(tmp_path: Path) -> None:
    """torch 2.4.0 without libomp140 next to torchvision 0.19.0: the fix names 0.19.1."""
    from fakes import TORCH_241_GRAPH, FakeTorch, companion, system32, write_tree

    import torchguard

    graph = dict(TORCH_241_GRAPH)
    graph["fbgemm.dll"] = ("asmjit.dll", "libomp140.x86_64.dll", *graph["fbgemm.dll"][2:])
    site = FakeTorch(version="2.4.0+cpu", graph=graph).write(tmp_path / "site")
    write_tree(site, companion("torchvision", "0.19.0", {"torchvision/__init__.py": b""}, {}))
    report = torchguard.scan([str(site)], system32=[str(system32(tmp_path / "s32"))])
    fixes = [c for f in report.errors for h in f.hints for c in h.commands]
    assert any(c.endswith("-m pip install torch==2.4.1 torchvision==0.19.1") for c in fixes), fixes


def test_a_windows_fix_takes_a_cuda_build_from_its_index_and_a_cpu_build_from_pypi() -> None:
    """PyPI's Windows wheels of torch are the CPU builds: a ``+cpu`` fix needs no second
    index (download.pytorch.org may be unreachable where PyPI is not); ``+cu124`` does."""
    from torchguard._rules.hints import HintContext, install_release

    cpu = install_release(HintContext(torch_version="2.4.0+cpu"), "2.4.1")
    assert cpu == "python -m pip install torch==2.4.1"
    cuda = install_release(HintContext(torch_version="2.4.0+cu124"), "2.4.1")
    assert (
        cuda
        == "python -m pip install torch==2.4.1 --index-url https://download.pytorch.org/whl/cu124"
    )

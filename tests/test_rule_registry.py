"""One rule style: every rule is registered once, declares its platforms, and lives in a small
module that :data:`MODULES` names for exactly those platforms."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from torchguard._report.findings import Finding
from torchguard._rules import registry
from torchguard._rules.registry import LINUX, MODULES, PLATFORMS, WINDOWS, RuleRegistrationError

RULES_DIR = Path(registry.__file__).resolve().parent
MAX_LINES = 300


def _all_rules() -> tuple[registry.Rule, ...]:
    for platform in PLATFORMS:
        registry.rules(platform)
    return registry.registered()


def _decorated() -> set[str]:
    """``module.function`` of every function the source marks with ``@rule(...)``."""
    found: set[str] = set()
    for path in RULES_DIR.glob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "rule"
                for d in node.decorator_list
            ):
                found.add(f"{path.stem}.{node.name}")
    return found


def test_every_rule_in_the_source_is_registered_once_with_its_platforms() -> None:
    rules = _all_rules()
    names = [r.name for r in rules]
    assert len(names) == len(set(names))
    assert set(names) == _decorated()
    for each in rules:
        assert each.platforms and each.platforms <= PLATFORMS, each.name
        listed = {p for p, modules in MODULES.items() if each.module in modules}
        assert listed == set(each.platforms), each.name


def test_each_platform_runs_each_listed_module_once() -> None:
    for platform, modules in MODULES.items():
        assert len(modules) == len(set(modules))
        ran = {r.module for r in registry.rules(platform)}
        assert ran == set(modules), platform
    assert {r.name for r in registry.rules(WINDOWS)}.isdisjoint(
        r.name for r in registry.rules(LINUX)
    )


def test_no_rule_module_is_over_300_lines() -> None:
    lengths = {
        path.name: len(path.read_text(encoding="utf-8").splitlines())
        for path in RULES_DIR.glob("*.py")
    }
    assert len(lengths) > 20
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}


def test_a_planted_duplicate_registration_fails() -> None:
    (closure,) = [r for r in _all_rules() if r.name == "closure.check"]

    def check(context: object) -> Iterator[Finding]:
        yield from ()

    check.__module__ = closure.check.__module__
    check.__qualname__ = "check"
    before = registry.registered()
    with pytest.raises(RuleRegistrationError, match=r"closure\.check is registered twice"):
        registry.rule(WINDOWS)(check)
    assert registry.registered() == before
    assert registry.rules(WINDOWS)[0].check is closure.check


def test_a_rule_must_name_known_platforms() -> None:
    with pytest.raises(RuleRegistrationError):
        registry.rule()
    with pytest.raises(RuleRegistrationError, match="macos"):
        registry.rule(LINUX, "macos")


def test_the_linux_rules_load_without_the_windows_rules() -> None:
    code = (
        "import sys; from torchguard._rules import registry; registry.rules('linux'); "
        "print(sorted(m for m in sys.modules if m.startswith('torchguard._rules.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = {name.rpartition(".")[2] for name in ast.literal_eval(out)}
    assert set(MODULES[LINUX]) <= loaded
    assert loaded.isdisjoint(set(MODULES[WINDOWS]) - set(MODULES[LINUX]))


def test_the_linux_rules_judge_a_context_built_by_hand() -> None:
    """The Linux rules need no pipeline: what the replay proves, metadata's warnings, and the
    package binaries' loads only once torch imports (as ``claim`` words them)."""
    from dataclasses import replace

    from torchguard._facts.vocab import Code
    from torchguard._platforms.linux.ldso_types import MISSING, LoadError
    from torchguard._platforms.linux.simulate import LinuxImport
    from torchguard._rules.linux_context import ExtensionLoad, LinuxContext
    from torchguard._rules.linux_hints import LinuxHints

    def claim(finding: Finding, package: str, path: str) -> Finding:
        return replace(finding, message=f"{package} at {path}: {finding.message}")

    gomp = LoadError(MISSING, "/site/torch/lib/libtorch_cpu.so", "libgomp.so.1")
    vision = LoadError(MISSING, "/site/torchvision/_C.so", "libjpeg.so.62")
    failing = LinuxContext(
        LinuxImport((), gomp),
        LinuxHints(torch_version="2.4.1"),
        "2.4.1",
        pins=[("torchvision", "0.19.0", "==2.4.0")],
        extension_loads=[ExtensionLoad("torchvision", "/site/torchvision/_C.so", vision)],
        claim=claim,
    )
    findings = registry.run_rules(failing, LINUX)
    assert [(f.code, f.severity, f.missing) for f in findings] == [
        (Code.MISSING_DLL, "error", "libgomp.so.1"),
        (Code.PACKAGE_MISMATCH, "warning", "torchvision==0.19.0"),
    ]
    working = registry.run_rules(replace(failing, replay=LinuxImport((), None)), LINUX)
    (extension,) = [f for f in working if f.missing == "libjpeg.so.62"]
    assert extension.message.startswith("torchvision at /site/torchvision/_C.so: ")
    assert extension.package == "torchvision"


def test_the_linux_package_checks_are_rules_over_a_context_built_by_hand() -> None:
    """Issue 26: the wheel tags, bitsandbytes' binaries and torch's neighbours are Linux rules
    over what the pipeline read and replayed, registered once, judged without the pipeline."""
    from torchguard._facts.bitsandbytes import Install
    from torchguard._facts.neighbours import KINDS
    from torchguard._facts.vocab import Code
    from torchguard._facts.wheel_tags import Interpreter
    from torchguard._platforms.linux.ldso_types import MISSING, LoadError
    from torchguard._platforms.linux.neighbour_loads import Order
    from torchguard._platforms.linux.neighbours import Neighbour
    from torchguard._platforms.linux.simulate import LinuxImport
    from torchguard._rules.linux_context import (
        Bitsandbytes,
        LinuxContext,
        NeighbourReplay,
        WheelTags,
    )
    from torchguard._rules.linux_hints import LinuxHints

    names = {r.name for r in registry.rules(LINUX)}
    assert {"linux_wheel_tags.check", "linux_bitsandbytes.check", "neighbours.check"} <= names
    assert names.isdisjoint(r.name for r in registry.rules(WINDOWS))

    (ctranslate2,) = [k for k in KINDS if k.package == "ctranslate2"]
    library = "/site/ctranslate2.libs/libctranslate2.so.4"
    cublas = "/site/nvidia/cublas/lib/libcublas.so.12"
    context = LinuxContext(
        LinuxImport((), None),
        LinuxHints(torch_version="2.8.0+cu128", cuda="12.8"),
        "2.8.0+cu128",
        "12.8",
        python_cmd="python3.12",
        wheel_tags=WheelTags(
            Interpreter((3, 12), False, "linux_x86_64"),
            (
                ("numpy", "2.0.0", "Tag: cp311-cp311-manylinux_2_17_x86_64\n"),
                ("six", "1.0", "Tag: py3-none-any\n"),
            ),
        ),
        bitsandbytes=Bitsandbytes(
            Install("0.45.2", "/site/bitsandbytes", ("libbitsandbytes_cuda126.so",), "", "/"),
            (12, 8),
            None,
        ),
        neighbours=(
            NeighbourReplay(
                Neighbour(ctranslate2, "4.8.5", library),
                Order(None, (), (("libcublas.so.12", cublas),)),
                Order(LoadError(MISSING, library, "libcublas.so.12")),
                (),
            ),
        ),
    )
    findings = registry.run_rules(context, LINUX)
    assert [(f.code, f.severity, f.package, f.missing) for f in findings] == [
        (Code.WHEEL_TAG_MISMATCH, "warning", "numpy", None),
        (Code.BITSANDBYTES_BINARY_MISSING, "warning", "bitsandbytes", "libbitsandbytes_cuda128.so"),
        (Code.NEIGHBOUR_LOAD_ORDER, "warning", "ctranslate2", "libcublas.so.12"),
    ]
    assert "python3.12 -m pip" in findings[0].hints[0].commands[0]
    assert findings[1].path == "/site/bitsandbytes/libbitsandbytes_cuda128.so"
    assert "/site/nvidia/cublas/lib" in findings[2].message
    # offline (no WHEEL read), no CUDA bitsandbytes, torch not importing: nothing to judge
    assert registry.run_rules(LinuxContext(context.replay, context.hints, "2.8.0"), LINUX) == []


def test_the_rules_kept_follow_every_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`registry.rules` keeps its answer between analyses, and asks again when a rule is
    registered, replaced or removed since."""
    first = registry.rules(WINDOWS)
    assert registry.rules(WINDOWS) == first

    def nothing(context: object) -> list[object]:
        return []

    def other(context: object) -> list[object]:
        return []

    extra = registry.Rule("closure.extra", frozenset({WINDOWS}), nothing)
    monkeypatch.setitem(registry._REGISTERED, extra.name, extra)
    added = registry.rules(WINDOWS)
    assert len(added) == len(first) + 1 and extra in added
    assert [r.module for r in added].index("closure") < added.index(extra)
    assert extra not in registry.rules(LINUX)
    replaced = registry.Rule("closure.extra", frozenset({WINDOWS}), other)
    monkeypatch.setitem(registry._REGISTERED, replaced.name, replaced)
    assert [r.check for r in registry.rules(WINDOWS) if r.name == "closure.extra"] == [other]
    monkeypatch.undo()
    assert registry.rules(WINDOWS) == first

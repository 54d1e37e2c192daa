"""What ``import PKG`` really runs, read statically from the package's sources."""

from __future__ import annotations

import pytest

from torchguard._facts.import_reach import (
    CAUGHT,
    CONDITIONAL,
    IN_FUNCTION,
    Reach,
    Source,
    reach,
)


def tree(**modules: str) -> dict[str, Source]:
    """``pkg__init`` -> package ``pkg``; ``pkg__ops__flash`` -> module ``pkg.ops.flash``."""
    found: dict[str, Source] = {}
    for key, text in modules.items():
        parts = key.split("__")
        is_package = parts[-1] == "init"
        name = ".".join(parts[:-1] if is_package else parts)
        found[name] = Source(text, is_package)
    return found


def reached(package: str, **modules: str) -> Reach:
    found = reach(package, tree(**modules))
    assert found is not None
    return found


def test_unconditional_imports_run_with_their_parents() -> None:
    found = reached(
        "pkg",
        pkg__init="from . import core\nimport pkg.sub.deep as deep\n",
        pkg__core="from ._C import thing\n",
        pkg__sub__init="",
        pkg__sub__deep="from .. import _D\n",
    )
    assert {"pkg", "pkg.core", "pkg._C", "pkg.sub", "pkg.sub.deep", "pkg._D"} <= found.runs


def test_xformers_shape_flash_is_guarded_and_never_run() -> None:
    """xformers 0.0.29's __init__ imports _cpp_lib and checkpoint; only ops.fmha.flash imports
    _C_flashattention, inside nested try/except ImportError."""
    flash = (
        "try:\n"
        "    try:\n"
        "        from ... import _C_flashattention\n"
        "    except ImportError:\n"
        "        import flash_attn\n"
        "except ImportError:\n"
        "    pass\n"
    )
    found = reached(
        "xformers",
        xformers__init="import torch\nfrom . import _cpp_lib\nfrom .checkpoint import checkpoint\n",
        xformers___cpp_lib="import torch\n",
        xformers__checkpoint="import torch\n",
        xformers__ops__init="from .fmha import memory_efficient_attention\n",
        xformers__ops__fmha__init="from . import flash\n",
        xformers__ops__fmha__flash=flash,
    )
    assert "xformers._C_flashattention" not in found.runs
    assert "xformers.ops" not in found.runs
    assert found.importer_of("xformers._C_flashattention") == ("xformers.ops.fmha.flash", CAUGHT)


@pytest.mark.parametrize(
    ("code", "guard"),
    [
        ("def load():\n    from . import _C\n", IN_FUNCTION),
        ("import sys\nif sys.platform == 'win32':\n    from . import _C\n", CONDITIONAL),
        ("for x in []:\n    from . import _C\n", CONDITIONAL),
        ("try:\n    from . import _C\nexcept Exception:\n    _C = None\n", CAUGHT),
        ("try:\n    from . import _C\nexcept:\n    _C = None\n", CAUGHT),
        ("try:\n    from . import _C\nexcept (OSError, ModuleNotFoundError):\n    pass\n", CAUGHT),
        ("try:\n    pass\nexcept ImportError:\n    from . import _C\n", CONDITIONAL),
    ],
)
def test_guarded_imports_do_not_run(code: str, guard: str) -> None:
    found = reached("pkg", pkg__init=code)
    assert "pkg._C" not in found.runs
    assert found.importer_of("pkg._C") == ("pkg", guard)


@pytest.mark.parametrize(
    "code",
    [
        "from ._C import *\n",
        "try:\n    from . import _C\nexcept OSError:\n    pass\n",  # ImportError escapes
        "try:\n    from . import _C\nfinally:\n    pass\n",
        "with open(__file__):\n    from . import _C\n",
        "class Ops:\n    from . import _C\n",
    ],
)
def test_imports_that_always_run(code: str) -> None:
    assert "pkg._C" in reached("pkg", pkg__init=code).runs


def test_an_unconditional_import_elsewhere_wins_over_a_guarded_one() -> None:
    found = reached(
        "pkg",
        pkg__init="from . import a, b\n",
        pkg__a="try:\n    from . import _C\nexcept ImportError:\n    pass\n",
        pkg__b="from . import _C\n",
    )
    assert "pkg._C" in found.runs
    assert found.importer_of("pkg._C") == ("pkg.a", CAUGHT)  # still named, first by name


def test_no_source_for_the_package_proves_nothing() -> None:
    assert reach("pkg", tree(other__init="from . import _C\n")) is None


def test_an_unparsable_module_imports_nothing() -> None:
    found = reached("pkg", pkg__init="from . import _C\ndef (:\n")
    assert found.runs == frozenset({"pkg"})


def test_relative_imports_beyond_the_top_are_ignored() -> None:
    assert reached("pkg", pkg__init="from .... import _C\n").runs == frozenset({"pkg"})

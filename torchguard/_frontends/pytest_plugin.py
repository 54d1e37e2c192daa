"""``pytest --torchguard``: judge ``import torch`` once, before collection, and stop early.

A CI job on a Windows runner that cannot import torch otherwise fails in every test with the
same ``OSError``. With ``--torchguard`` the session runs :func:`torchguard.ensure` first (which
also registers the DLL folders torch forgets, for the whole test process), prints one header
line with the verdict and, when torch cannot be imported, prints the diagnosis and ends the
session before collecting anything (exit status 1). ``--torchguard-scan TARGET`` judges a
Windows install or wheel offline instead (``torchguard scan``), from any OS; it implies
``--torchguard`` and, like ``torchguard scan``, assumes the current Visual C++ Redistributable
unless ``--torchguard-clean-windows`` is given. The assumption is printed under the verdict.

Registered as a ``pytest11`` entry point; it does nothing unless the option is given, and it
imports nothing heavy until then. A fault of torchguard's own never ends the session: the
header line names the internal error and the tests run as without the plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from torchguard._report.report import Report

_REPORT = pytest.StashKey["Report"]()
_ASSUMED = pytest.StashKey[str]()
_FAULT = pytest.StashKey[str]()
_EXIT_BROKEN = 1


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torchguard", "torchguard: can torch be imported?")
    group.addoption(
        "--torchguard",
        action="store_true",
        help="run torchguard.ensure() before collection; stop at once if torch cannot import",
    )
    group.addoption(
        "--torchguard-scan",
        action="append",
        default=[],
        metavar="TARGET",
        help="judge this Windows install or .whl offline (repeatable; implies --torchguard)",
    )
    group.addoption(
        "--torchguard-system32",
        action="append",
        default=[],
        metavar="DIR",
        help="with --torchguard-scan: DLLs that count as being in System32 (repeatable)",
    )
    group.addoption(
        "--torchguard-clean-windows",
        action="store_true",
        help="with --torchguard-scan: assume no Visual C++ redistributable (default: current)",
    )


def _judge(config: pytest.Config) -> Report:
    targets: list[str] = config.getoption("torchguard_scan")
    if targets:
        from torchguard._frontends.api import scan
        from torchguard._platforms.windows.assumptions import assumed_line

        system32: list[str] = config.getoption("torchguard_system32")
        clean = bool(config.getoption("torchguard_clean_windows"))
        try:
            report = scan(targets, system32=system32, clean_windows=clean)
        except ValueError as exc:
            raise pytest.UsageError(f"--torchguard-scan: {exc}") from None
        config.stash[_ASSUMED] = assumed_line(clean, system32)
        return report
    from torchguard._frontends.api import ensure
    from torchguard._report.errors import TorchDllError

    try:
        return ensure()
    except TorchDllError as exc:
        return exc.report


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    scanning = bool(config.getoption("torchguard_scan"))
    if not scanning:
        for option in ("--torchguard-system32", "--torchguard-clean-windows"):
            if config.getoption(option.lstrip("-").replace("-", "_")):
                raise pytest.UsageError(f"{option} describes a scan: give --torchguard-scan too")
    if config.getoption("torchguard") or scanning:
        try:
            config.stash[_REPORT] = _judge(config)
        except pytest.UsageError:
            raise
        except Exception as exc:  # fail open: a torchguard bug must not stop the tests
            _fault(config, exc)


def _fault(config: pytest.Config, exc: Exception) -> None:
    """Remember a fault of torchguard's own for the header; the session continues."""
    from torchguard._facts.internal import describe
    from torchguard._version import __version__

    if _REPORT in config.stash:
        del config.stash[_REPORT]
    config.stash[_FAULT] = (
        f"torchguard {__version__}: internal error ignored, the session continues: "
        f"{describe(exc)} (please report this as a torchguard bug)"
    )


def verdict(report: Report) -> str:
    """The one header line."""
    from torchguard._version import __version__

    torch = f"torch {report.torch.version}" if report.torch else "torch"
    warnings = f", {len(report.warnings)} warning(s)" if report.warnings else ""
    if report.blocking:
        first = report.blockers[0]
        return f"torchguard {__version__}: BROKEN, error[{first.code}]: {first.message}"
    others = len(report.errors)  # siblings' and extensions' errors: torch itself imports
    errors = f", {others} error(s) in torch's siblings or extensions" if others else ""
    if report.mode == "non-windows":
        return (
            f"torchguard {__version__}: {torch} found; not Windows, no DLL checks{errors}{warnings}"
        )
    if report.import_torch is None:
        return f"torchguard {__version__}: {torch} found; no native library to check{warnings}"
    return f"torchguard {__version__}: import {torch} succeeds{errors}{warnings}"


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    report = config.stash.get(_REPORT, None)
    if report is not None:
        try:
            assumed = config.stash.get(_ASSUMED, None)
            return [verdict(report), *([assumed] if assumed else [])]
        except Exception as exc:
            _fault(config, exc)
    fault = config.stash.get(_FAULT, None)
    return [fault] if fault else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    report = session.config.stash.get(_REPORT, None)
    if report is None or not report.blocking:
        return  # a broken torchvision is for the tests that import it to show
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    writer = getattr(reporter, "_tw", None)
    colour = bool(getattr(writer, "hasmarkup", False))
    try:
        text = report.render_text(colour=colour)
    except Exception as exc:  # the verdict stands; only its rendering failed
        from torchguard._facts.internal import describe

        text = f"{report.blockers[0].message}\n(torchguard could not render more: {describe(exc)})"
    if reporter is not None:
        reporter.write_sep("=", "torchguard: torch cannot be imported here")
        reporter.write_line(text)
    first = report.blockers[0]
    pytest.exit(
        f"torchguard: import torch would fail ({first.code}); no test collected",
        returncode=_EXIT_BROKEN,
    )

"""uv's resolver in place of pip's, where the user has uv (``check --resolver auto|pip|uv``).

The question stays "what would ``pip install`` do": uv is given what pip would be given (the
requirements ``check`` read, the indexes, the constraint files, pip's own configuration
translated, ``--index-strategy unsafe-best-match`` as pip merges its indexes) for the same
target (``--python-platform x86_64-pc-windows-msvc`` or ``aarch64-pc-windows-msvc``,
``--python-version X.Y``), and its PEP 751 lock (``uv pip compile --format pylock.toml``) is read
into the :class:`~.resolve.Planned` rows pip's report gives. Whatever uv cannot be told as pip
would be (a free-threaded target, an option or setting of pip's uv has no equivalent for, a
Python that cannot read TOML), and every uv failure (an index it cannot reach, a release
published only as source, a conflict), goes to pip instead, with one line saying why: pip's
path explains failures and resolves source-only releases; uv never gives a verdict of its own.

uv is found on ``PATH``, else as the ``uv`` Python package's binary; it is never a dependency.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from torchguard._frontends.pip_reasons import PipFailure

RESOLVERS = ("auto", "pip", "uv")
ENVIRONMENT = "TORCHGUARD_RESOLVER"
PLATFORMS = {"win_amd64": "x86_64-pc-windows-msvc", "win_arm64": "aarch64-pc-windows-msvc"}

_SAME_TO_UV = {"-c": "-c", "--constraint": "-c", "-i": "--index-url", "--index-url": "--index-url"}
_SAME_TO_UV.update({"--extra-index-url": "--extra-index-url", "-f": "--find-links"})
_SAME_TO_UV.update({"--find-links": "--find-links", "--trusted-host": "--allow-insecure-host"})
_FLAGS_TO_UV = {"--pre": ["--prerelease", "allow"], "--no-index": ["--no-index"]}
_IGNORED_WITH_VALUE = ("--only-binary", "--no-binary")  # only wheels are resolved either way
_IGNORED_FLAGS = ("--prefer-binary",)
_HARMLESS_SETTINGS = frozenset(
    (
        "cache-dir",
        "cert",
        "client-cert",
        "config-file",
        "default-timeout",
        "disable-pip-version-check",
        "exists-action",
        "keyring-provider",
        "log",
        "no-cache-dir",
        "no-color",
        "no-input",
        "no-warn-script-location",
        "progress-bar",
        "proxy",
        "quiet",
        "require-virtualenv",
        "retries",
        "root-user-action",
        "break-system-packages",
        "timeout",
        "trusted-host",
        "verbose",
        "only-binary",
        "prefer-binary",
        "use-feature",
    )
)
"""pip settings that change nothing in what ``pip install --only-binary=:all:`` resolves (or,
``trusted-host`` and ``cert``, that are translated); any other one sends ``check`` to pip."""
_UV_KEPT = ("UV_CACHE_DIR", "UV_NATIVE_TLS", "UV_HTTP_TIMEOUT", "UV_NO_CACHE")
"""uv's own environment settings kept; the others (``UV_INDEX_URL``, ``UV_CONSTRAINT``, ...)
would make uv answer another question than pip's."""


class Locked(NamedTuple):
    """One distribution of uv's lock: the fields of :class:`~.resolve.Planned`."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str | None


class UvFallback(Exception):
    """uv cannot answer as pip would: the message says why, pip resolves instead."""


@dataclass
class Resolver:
    """The resolver asked for (``auto``, ``pip``, ``uv``), uv's path when it is used, and what
    was used in the end (``uv``, ``pip``), with a line for each fallback to pip."""

    wanted: str = "pip"
    uv: str | None = None
    used: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    _settings: dict[str, list[str]] | None = None

    @property
    def by(self) -> str:
        """``uv``, ``pip``, or ``uv and pip`` (a fallback after a resolution uv gave)."""
        return " and ".join(sorted(self.used, reverse=True)) or "pip"

    def describe(self) -> str:
        """For the ``checked:`` line: ``resolved by uv``, ``resolved by pip``."""
        return f"resolved by {self.by}"


def choose(flag: str | None = None, environ: Mapping[str, str] | None = None) -> Resolver:
    """``--resolver`` (else :data:`ENVIRONMENT`, else ``auto``): uv when asked and found."""
    from torchguard._frontends.check_error import CheckError

    environ = os.environ if environ is None else environ
    source = "--resolver" if flag else ENVIRONMENT
    wanted = (flag or environ.get(ENVIRONMENT, "") or "auto").strip().lower()
    if wanted not in RESOLVERS:
        raise CheckError(f"{source} {wanted}: expected one of {', '.join(RESOLVERS)}")
    if wanted == "pip":
        return Resolver("pip")
    uv = find_uv()
    if uv is None and wanted == "uv":
        raise CheckError(
            f"{source} uv: no uv found (neither a `uv` on PATH nor the uv Python package: "
            "pip install uv), or use --resolver pip"
        )
    return Resolver(wanted, uv)


def find_uv() -> str | None:
    """A ``uv`` on PATH, else the binary of the ``uv`` Python package, else None."""
    found = shutil.which("uv")
    if found:
        return found
    from importlib.util import find_spec

    try:
        if find_spec("uv") is None:
            return None
        from uv import find_uv_bin  # type: ignore[import-not-found,unused-ignore]

        return str(find_uv_bin())
    except (ImportError, OSError, ValueError):  # FileNotFoundError: a package without its binary
        return None


def uv_command(
    uv: str,
    arguments: Sequence[str],
    python: str,
    platform: str,
    index_urls: Sequence[str],
    settings: Mapping[str, list[str]],
    requirements_file: str,
) -> list[str]:
    """uv's command line for what pip would be asked (``arguments`` as ``check`` hands pip
    them, ``settings`` pip's configuration); the requirements go into ``requirements_file``.

    Raises :class:`UvFallback` for what uv cannot be told as pip would be."""
    if python.endswith("t"):
        raise UvFallback(f"uv cannot resolve for a free-threaded CPython ({python})")
    if platform not in PLATFORMS:
        raise UvFallback(f"uv has no target for {platform}")
    command = [uv, "pip", "compile", requirements_file, "--format", "pylock.toml"]
    command += ["--python-platform", PLATFORMS[platform], "--python-version", python]
    command += ["--only-binary", ":all:", "--index-strategy", "unsafe-best-match"]
    command += ["--no-config", "--no-header", "--quiet"]
    # the target is --python-version's; an interpreter given spares uv's search of PATH for a
    # 3.X one (seconds where pyenv's shims answer each query), never a download of one
    command += ["--python", sys.executable, "--no-python-downloads"]
    options: list[str] = []
    main_given = bool(index_urls)
    for number, url in enumerate(index_urls):
        options += ["--index-url" if number == 0 else "--extra-index-url", url]
    requirements: list[str] = []
    words = list(arguments)
    while words:
        word = words.pop(0)
        if not word.startswith("-"):
            requirements.append(word)
            continue
        option, _, value = word.partition("=")
        if option in _FLAGS_TO_UV and not value:
            options += _FLAGS_TO_UV[option]
        elif option in _IGNORED_FLAGS and not value:
            pass
        elif option in _SAME_TO_UV or option in _IGNORED_WITH_VALUE:
            if not value:
                if not words:
                    raise UvFallback(f"{option} without a value")
                value = words.pop(0)
            if option in ("-i", "--index-url"):
                main_given = True
            if option in _SAME_TO_UV:
                options += [_SAME_TO_UV[option], value]
        else:
            raise UvFallback(f"uv is not given pip's option {option} ({' '.join(arguments)})")
    options += _from_settings(settings, main_given)
    with open(requirements_file, "w", encoding="utf-8") as handle:
        handle.write("".join(f"{line}\n" for line in requirements))
    return command + options


def _from_settings(settings: Mapping[str, list[str]], main_given: bool) -> list[str]:
    """pip's configuration (``pip config list``) as uv options."""
    options: list[str] = []
    for key, values in settings.items():
        if key == "index-url":
            if not main_given:
                options += ["--index-url", values[0]]
        elif key in ("extra-index-url", "find-links", "constraint"):
            flag = {"constraint": "-c"}.get(key, f"--{key}")
            for value in values:
                options += [flag, value]
        elif key == "trusted-host":
            for value in values:
                options += ["--allow-insecure-host", value]
        elif key == "pre":
            if values and values[0].lower() in ("1", "true", "yes", "on"):
                options += ["--prerelease", "allow"]
        elif key == "no-index":
            if values and values[0].lower() in ("1", "true", "yes", "on"):
                options += ["--no-index"]
        elif key not in _HARMLESS_SETTINGS:
            raise UvFallback(
                f"pip's configuration sets {key}, which uv is not told as pip reads it"
            )
    return options


def parse_settings(text: str) -> dict[str, list[str]]:
    """``pip config list``'s lines (``global.constraint='/x.txt'``, ``:env:.pre='1'``) as the
    settings ``pip install`` reads: the ``:env:`` ones over ``install.`` over ``global.``."""
    rank = {"global": 0, "install": 1, ":env:": 2}
    chosen: dict[str, tuple[int, list[str]]] = {}
    for line in text.splitlines():
        name, equals, value = line.partition("=")
        section, dot, key = name.strip().rpartition(".")
        if not (equals and dot) or section not in rank:
            continue  # another command's section (download.), or not a setting
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if rank[section] >= chosen.get(key, (-1, []))[0]:
            chosen[key] = (rank[section], value.split())
    return {key: values for key, (_, values) in chosen.items()}


def _run(
    command: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``command`` with no standard input, its output captured as text, within ``timeout``."""
    return subprocess.run(
        list(command),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


def pip_settings(resolver: Resolver) -> dict[str, list[str]]:
    """pip's configuration as ``pip install`` would read it here (read once per check)."""
    if resolver._settings is None:
        from torchguard._frontends.pip_python import pip_interpreter

        command = [pip_interpreter().python, "-m", "pip", "config", "list"]
        try:
            done = _run(command, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UvFallback(f"pip's configuration could not be read ({exc})") from None
        if done.returncode != 0:
            raise UvFallback("pip's configuration could not be read (pip config list failed)")
        resolver._settings = parse_settings(done.stdout)
    return resolver._settings


def resolve_with_uv(
    resolver: Resolver,
    arguments: Sequence[str],
    python: str,
    platform: str,
    index_urls: Sequence[str],
    timeout: float,
) -> list[Locked]:
    """uv's answer, a row for each :class:`~.resolve.Planned`; :class:`UvFallback` when pip must
    answer instead, :class:`~.pip_reasons.PipFailure` when uv ran out of time."""
    import tempfile

    assert resolver.uv is not None
    _toml_reader()  # before uv's seconds, not after
    settings = pip_settings(resolver)
    with tempfile.TemporaryDirectory(prefix="torchguard-uv-") as folder:
        command = uv_command(
            resolver.uv,
            arguments,
            python,
            platform,
            index_urls,
            settings,
            os.path.join(folder, "requirements.in"),
        )
        environment = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
        environment.update({k: os.environ[k] for k in _UV_KEPT if k in os.environ})
        if settings.get("cert") and "SSL_CERT_FILE" not in environment:
            environment["SSL_CERT_FILE"] = settings["cert"][0]
        try:
            done = _run(command, timeout=timeout, env=environment, cwd=os.getcwd())
        except subprocess.TimeoutExpired:
            raise PipFailure(
                [
                    f"uv did not finish resolving within {timeout:.0f} s and was stopped",
                    "give it longer: --resolve-timeout SECONDS (or ask pip: --resolver pip)",
                ],
                "timeout",
            ) from None
        except OSError as exc:
            raise UvFallback(f"uv could not be run ({exc})") from None
    if done.returncode != 0:
        raise UvFallback(f"uv failed: {_first_error(done.stderr) or f'exit {done.returncode}'}")
    return parse_pylock(done.stdout, python, platform)


_CROSS = "\u00d7"  # uv's heading of a resolution failure, as pip's


def _first_error(text: str) -> str:
    """uv's reason in one line: its ``error:`` (or multiplication sign) line, then the first
    and the last ``cause:`` under it (which URL, what went wrong there), or the ``╰─▶`` line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    error = next((line for line in lines if line.startswith(("error:", _CROSS))), "")
    error = error.removeprefix("error:").removeprefix(_CROSS).strip().rstrip(":")
    causes = [
        line.split(":", 1)[1].strip() for line in lines if line.startswith(("cause:", "Caused by:"))
    ]
    causes += [line.removeprefix("╰─▶").strip() for line in lines if line.startswith("╰─▶")]
    if len(causes) > 1:
        error += f"; {causes[0]} ({causes[-1]})"
    elif causes:
        error += f"; {causes[0]}"
    return error[:400]


def parse_pylock(text: str, python: str, platform: str) -> list[Locked]:
    """A PEP 751 lock (uv's ``--format pylock.toml``) as :class:`~.resolve.Planned`'s rows: each
    package's wheel that pip would pick for CPython ``python`` on ``platform`` (the most
    specific tag it accepts). :class:`UvFallback` when a package comes with no wheel."""
    from urllib.parse import unquote

    lock = _toml(text)
    planned = []
    for package in lock.get("packages", []):
        name, version = str(package.get("name", "")), str(package.get("version", ""))
        wheel = _best_wheel(package.get("wheels") or [], python, platform)
        if wheel is None:
            raise UvFallback(f"uv resolved {name} {version} to no wheel for this target")
        url = str(wheel.get("url", ""))
        filename = str(wheel.get("name") or unquote(url.rsplit("/", 1)[-1].split("#", 1)[0]))
        hashes = wheel.get("hashes") or {}
        planned.append(Locked(name, version, filename, url, hashes.get("sha256")))
    return planned


def _toml(text: str) -> dict[str, Any]:
    try:
        lock: dict[str, Any] = _toml_reader()(text)
    except ValueError as exc:
        raise UvFallback(f"uv's lock could not be read ({exc})") from None
    return lock


def _toml_reader() -> Any:
    """tomllib's ``loads`` (or tomli's before Python 3.11); :class:`UvFallback` without one."""
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # Python 3.9 and 3.10
        try:
            import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            raise UvFallback("this Python reads no TOML (Python 3.11+, or tomli)") from None
    return tomllib.loads


def _best_wheel(wheels: Sequence[Any], python: str, platform: str) -> Any:
    from urllib.parse import unquote

    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    from torchguard._frontends.target import Target

    version = ".".join(python.split(".")[:2])
    rank = {tag: number for number, tag in enumerate(Target(version, False, platform).tags())}
    best: tuple[int, Any] | None = None
    for wheel in wheels:
        name = wheel.get("name") or str(wheel.get("url", "")).rsplit("/", 1)[-1]
        try:
            tags = parse_wheel_filename(unquote(name.split("#", 1)[0]))[3]
        except InvalidWheelFilename:
            continue
        score = min((rank[t] for t in tags if t in rank), default=None)
        if score is not None and (best is None or score < best[0]):
            best = (score, wheel)
    return None if best is None else best[1]

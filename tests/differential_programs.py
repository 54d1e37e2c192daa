"""The differential tier's programs: minimal work, each with and without a front door.

Every program does the least that proves torch works (import it, one tensor operation) and
prints it; a door is a prelude placed before that work. The programs are plain source text so
that the Linux cells run them as files and the Wine cells as ``python.exe -c``.
"""

from __future__ import annotations

WORK = "import torch\nprint('torch', torch.__version__, (torch.ones(2) * 2).tolist())\n"
"""The program itself: what a user's script does with torch."""

ENSURE = "import torchguard\ntorchguard.ensure()\n"
"""The README's first example."""

DIAGNOSE = (
    "import sys\nimport torchguard\n"
    "for _finding in torchguard.diagnose().errors:\n"
    "    print(f'diagnose(): error[{_finding.code}]', file=sys.stderr)\n"
)
"""``diagnose()`` must change nothing: it only reports (on stderr here)."""

THREADS = """\
import threading
import torchguard

_outcomes = [None] * 8
_start = threading.Barrier(8)


def _call(index):
    _start.wait()
    try:
        torchguard.ensure()
        _outcomes[index] = "ok"
    except torchguard.TorchDllError as exc:
        _outcomes[index] = exc


_threads = [threading.Thread(target=_call, args=(i,), daemon=True) for i in range(8)]
for _thread in _threads:
    _thread.start()
for _thread in _threads:
    _thread.join()
_failed = [o for o in _outcomes if o != "ok"]
if _failed:
    if len(_failed) != 8 or len({type(o) for o in _failed}) != 1:
        raise SystemExit(f"ensure() from 8 threads: the threads disagree: {_outcomes}")
    raise _failed[0]
"""
"""``ensure()`` from 8 threads at once: one verdict for all, nobody blocks for ever."""

PROBE = (
    "import importlib.util\n"
    "print('torch available:', importlib.util.find_spec('torch') is not None)\n"
)
"""How transformers, accelerate, diffusers and huggingface_hub ask whether torch exists:
they never import it, so no door may act here."""

SPAWN = """\
import multiprocessing


def _work(_):
    import torch

    return f"torch {torch.__version__} {(torch.ones(2) * 2).tolist()}"


if __name__ == "__main__":
{door}    with multiprocessing.get_context("spawn").Pool(1) as pool:
        print("spawned child:", pool.map(_work, [0])[0])
"""
"""A ``spawn`` child imports torch (DataLoader workers, Windows' only start method)."""

CLOBBER = """\
import setproctitle

setproctitle.setproctitle("differential-worker")
with open("/proc/self/environ", "rb") as _environ:
    print("/proc/self/environ readable after the title:", bool(_environ.read().strip(b"\\0")))
"""
"""``setproctitle`` first (Ray workers, gunicorn, celery, uWSGI): the memory
``/proc/self/environ`` shows is overwritten (the test extra installs it on Linux)."""

PYTEST_FILE = """\
def test_torch():
    import torch

    print("torch", torch.__version__, (torch.ones(2) * 2).tolist())
"""
"""The program as a test suite, for ``pytest --torchguard``."""


def spawn(door: str = "") -> str:
    """:data:`SPAWN` with ``door`` run in the parent before the child starts."""
    indented = "".join(f"    {line}\n" for line in door.splitlines())
    return SPAWN.replace("{door}", indented)

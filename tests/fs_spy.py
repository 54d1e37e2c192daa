"""Every path a child process's call touches through the file system, for the verdict memo's
coverage tests (Linux: ``test_memo.py``; Windows under Wine: ``e2e/test_memo_wine.py``),
which each run it around their platform's analysis and compare with what the memo watches."""

from __future__ import annotations


def spied(call: str) -> str:
    """Python source (for a script that has imported ``builtins`` and ``os``) that runs
    ``report = <call>`` with ``os``'s file calls and ``open`` spied, then puts them back:
    ``touched`` maps each absolute path to the names of the calls made on it."""
    return f"""
touched = {{}}
def spy(name, real):
    def call(*args, **kwargs):
        if args and isinstance(args[0], (str, bytes, os.PathLike)):
            touched.setdefault(os.path.abspath(os.fsdecode(args[0])), set()).add(name)
        return real(*args, **kwargs)
    return call
names = ("stat", "lstat", "listdir", "scandir", "access", "readlink")
reals = {{name: getattr(os, name) for name in names}}
real_open = builtins.open
for name in names:
    setattr(os, name, spy(name, reals[name]))
builtins.open = spy("open", real_open)
report = {call}
for name in names:
    setattr(os, name, reals[name])
builtins.open = real_open
"""

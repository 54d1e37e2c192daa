"""pip's reasons, whatever their case or prefix: captured pip 23-25 output, fed to the filter
that turns it into the lines ``check`` prints on exit 2."""

from __future__ import annotations

from torchguard._frontends.pip_reasons import explain_failure, subprocess_reasons

GIT_CLONE = """\
Collecting git+https://github.invalid/huggingface/diffusers@363d1ab7e24c5ed6c190abb00df66d9edb74383b
  Cloning https://github.invalid/huggingface/diffusers (to revision 363d1ab7) to /tmp/pip-req-build-i1s7rui0
  Running command git clone --filter=blob:none --quiet https://github.invalid/huggingface/diffusers /tmp/pip-req-build-i1s7rui0
  fatal: unable to access 'https://github.invalid/huggingface/diffusers/': Could not resolve host: github.invalid
  error: subprocess-exited-with-error
  \n  [x] git clone --filter=blob:none --quiet https://github.invalid/huggingface/diffusers /tmp/pip-req-build-i1s7rui0 did not run successfully.
  │ exit code: 128
  ╰─> See above for output.
  \n  note: This error originates from a subprocess, and is likely not a problem with pip.
error: subprocess-exited-with-error

[x] git clone --filter=blob:none --quiet https://github.invalid/huggingface/diffusers /tmp/pip-req-build-i1s7rui0 did not run successfully.
│ exit code: 128
╰─> See above for output.

note: This error originates from a subprocess, and is likely not a problem with pip.
"""

BUILD_TRACEBACK = """\
Processing ./bad/badpkg-1.0.tar.gz
  Installing build dependencies: started
  Installing build dependencies: finished with status 'done'
  Getting requirements to build wheel: started
  Getting requirements to build wheel: finished with status 'error'
  error: subprocess-exited-with-error
  \n  [x] Getting requirements to build wheel did not run successfully.
  │ exit code: 1
  ╰─> [6 lines of output]
      Traceback (most recent call last):
        File "/tmp/pip-build-env-tntq571i/overlay/lib/python3.11/site-packages/setuptools/build_meta.py", line 317, in run_setup
          exec(code, locals())  # noqa: S102 # exec is intentional here
          ^^^^^^^^^^^^^^^^^^^^
        File "<string>", line 2, in <module>
      RuntimeError: CUDA_HOME environment variable is not set
      [end of output]
  \n  note: This error originates from a subprocess, and is likely not a problem with pip.
error: subprocess-exited-with-error

[x] Getting requirements to build wheel did not run successfully.
│ exit code: 1
╰─> See above for output.

note: This error originates from a subprocess, and is likely not a problem with pip.
"""

METADATA = """\
  Preparing metadata (pyproject.toml): finished with status 'error'
  error: metadata-generation-failed

  [x] Encountered error while generating package metadata.
  ╰─> [2 lines of output]
      running dist_info
      error: invalid command 'dist_info'
      [end of output]

note: This is an issue with the package mentioned above, not pip.
hint: See above for details.
"""


def lines(text: str) -> list[str]:
    """pip's multiplication sign in front of a failed step (written [x] here for ruff)."""
    return text.replace("[x] ", "\u00d7 ").splitlines()


def reasons(text: str) -> list[str]:
    return explain_failure(lines(text), [], [], "3.11").lines


def test_git_clone_failure_says_why_not_the_subprocess_note() -> None:
    lines = reasons(GIT_CLONE)
    assert lines == [
        "git clone --filter=blob:none --quiet https://github.invalid/huggingface/diffusers "
        "/tmp/pip-req-build-i1s7rui0 failed (exit code 128): fatal: unable to access "
        "'https://github.invalid/huggingface/diffusers/': Could not resolve host: github.invalid"
    ]
    assert not any("originates from a subprocess" in line for line in lines)


def test_build_failure_keeps_the_exception_line_of_its_output() -> None:
    assert reasons(BUILD_TRACEBACK) == [
        "Getting requirements to build wheel failed (exit code 1): "
        "RuntimeError: CUDA_HOME environment variable is not set"
    ]


def test_lower_case_error_inside_an_output_block_is_the_reason() -> None:
    assert subprocess_reasons(lines(METADATA)) == [
        "Encountered error while generating package metadata: error: invalid command 'dist_info'"
    ]


def test_error_lines_in_any_case_and_indent_count() -> None:
    text = [
        "Collecting torch",
        "  error: externally-managed-environment",
        "  ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device",
        "note: If you believe this is a mistake, please contact your Python installation",
    ]
    assert reasons("\n".join(text)) == [
        "Could not install packages due to an OSError: [Errno 28] No space left on device"
    ]


def test_without_an_error_line_the_last_line_that_is_not_a_note() -> None:
    text = ["Collecting torch", "Killed", "note: This error originates from a subprocess"]
    assert reasons("\n".join(text)) == ["Killed"]

"""CI pre-flight: scan the Windows wheels you are about to ship, from any OS.

    python examples/preflight.py dist/*.whl --system32 vcredist/

Exits 1 when `import torch` would fail on a clean Windows with those wheels installed.
"""

from __future__ import annotations

import argparse
import json
import sys

import torchguard


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("wheels", nargs="+")
    parser.add_argument("--system32", action="append", default=[])
    args = parser.parse_args()
    report = torchguard.scan(args.wheels, system32=args.system32)
    for finding in report.errors:
        print(
            json.dumps({"code": finding.code, "missing": finding.missing, "chain": finding.chain})
        )
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

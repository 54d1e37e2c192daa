"""Which conda package installed a file, from the environment's ``conda-meta\\*.json``.

Read only on the rare path of a finding about a file outside every pip RECORD (an OpenMP
runtime in ``Library\\bin``), so a healthy analysis never opens these files.
"""

from __future__ import annotations

import json

from torchguard._platforms.windows.tree import PathKey, WinTree, join, path_key


def conda_owners(tree: WinTree, prefix: str) -> dict[PathKey, list[str]]:
    """Path of each file a conda package lists -> every ``name==version`` listing it (two when
    one package's file overwrote another's: conda-forge's llvm-openmp and intel-openmp both
    ship ``Library\\bin\\libiomp5md.dll``); empty outside conda."""
    meta = join(prefix, "conda-meta")
    owners: dict[PathKey, list[str]] = {}
    for _key, (name, _entry) in sorted(tree.listdir(meta).items()):
        if not name.lower().endswith(".json"):
            continue
        text = tree.read_text(join(meta, name))
        try:
            record = json.loads(text) if text else None
        except ValueError:  # a damaged record names no owner; it is not ours to judge
            continue
        if not isinstance(record, dict):
            continue
        package, version, files = record.get("name"), record.get("version"), record.get("files")
        if not isinstance(package, str) or not isinstance(files, list):
            continue
        label = f"{package}=={version}" if isinstance(version, str) else package
        for relative in files:
            if isinstance(relative, str) and relative:
                key = path_key(join(prefix, relative.replace("/", "\\")))
                owners.setdefault(key, []).append(label)
    return owners

# mypy: disable-error-code="import-not-found, import-untyped"
"""What both peer workers share: the command line and the installed versions.

Imported by the worker scripts as a sibling module (a script's own folder is on
``sys.path``); like them it imports nothing from hybrid_memory or eval, since it
runs in a peer's own environment.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any


def versions(names: tuple[str, ...]) -> dict[str, str]:
    """The installed version of each package ("absent" when it is not installed)."""
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def main(argv: list[str] | None, description: str, run: Callable[[dict[str, Any], bool], dict[str, Any]],
         summary: Callable[[dict[str, Any]], str]) -> int:
    """``WORKLOAD.json OUT.json [--quiet]``: run the workload, write the raw result, print ``summary``."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("workload", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    workload = json.loads(args.workload.read_text(encoding="utf-8"))
    result = run(workload, not args.quiet)
    args.out.write_text(json.dumps(result), encoding="utf-8")
    print(summary(result))
    return 0

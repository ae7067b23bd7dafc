"""A progress bar for long passes (export, import, key rotation, ingest): tqdm's on
stderr when tqdm is installed and stderr is a terminal, else one that draws nothing."""

from __future__ import annotations

import importlib
import sys
from typing import Any


class NoBar:
    def update(self, n: int = 1) -> None:
        return None

    def close(self) -> None:
        return None


def progress_bar(total: int | None, desc: str) -> Any:
    """A tqdm bar on stderr when tqdm is installed (drawn only on a terminal)."""
    try:
        tqdm = importlib.import_module("tqdm").tqdm
    except ImportError:
        return NoBar()
    return tqdm(total=total, desc=desc, unit=" rows", leave=False, disable=not sys.stderr.isatty())

"""A progress bar for long passes (export, import, key rotation, ingest): tqdm's on
stderr when tqdm is installed and stderr is a terminal, else one that draws nothing."""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator
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


def counting_bar(desc: str, unit: str) -> Any:
    """A tqdm bar that counts from zero (tqdm required: ImportError without it)."""
    from tqdm import tqdm

    return tqdm(total=0, unit=unit, desc=desc)


@contextlib.contextmanager
def reporting(bar: Any, *, advance: bool) -> Iterator[Callable[[int, int], None]]:
    """A ``(done, total)`` callback that draws on ``bar`` (None: nothing), which is
    closed at the end. ``advance``: moved on with ``update``; else set and redrawn."""

    def report(done: int, total: int) -> None:
        if bar is not None:
            bar.total = total
            if advance:
                bar.update(done - bar.n)
            else:
                bar.n = done
                bar.refresh()

    try:
        yield report
    finally:
        if bar is not None:
            bar.close()

"""What every data set loader shares: the trace events it emits, the report of what
it changed or left out, and reading JSON with errors that name the file.

The loaders (:mod:`eval.datasets`, :mod:`eval.realmem`) turn a data set into the
events of the trace format; nothing here knows any one data set.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

Event = dict[str, Any]

EXAMPLES_KEPT = 3  # examples a Report keeps per kind: enough to see what happened


class DatasetError(ValueError):
    """A data set is unknown, missing, or not in the schema its loader expects."""


@dataclass
class Report:
    """What a loader normalised, dropped or skipped: a count per kind, a few examples each."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def note(self, kind: str, example: str) -> None:
        """Count one occurrence of ``kind``, keeping ``example`` if few are kept yet."""
        self.counts[kind] += 1
        kept = self.examples.setdefault(kind, [])
        if len(kept) < EXAMPLES_KEPT:
            kept.append(example)


def namespace_event(name: str) -> Event:
    """A fresh, empty memory named ``name``."""
    return {"op": "namespace", "name": name}


def add_event(node_id: str, parent: str | None, kind: str, content: str, ts: float) -> Event:
    """One node added under ``parent`` (None: at the root)."""
    return {
        "op": "add",
        "id": node_id,
        "parent": parent,
        "type": kind,
        "content": content,
        "ts": ts,
    }


def focus_event(node_id: str) -> Event:
    """The agent turns to ``node_id``: it becomes the active node."""
    return {"op": "focus", "id": node_id}


def query_event(
    query_id: str,
    text: str,
    gold: list[str],
    task: list[str],
    ts: float,
    category: str,
    **extra: str,
) -> Event:
    """A query event; ``extra`` fields (answer, subcategory) ride along for reports."""
    return {
        "op": "query",
        "id": query_id,
        "text": text,
        "gold": gold,
        "task": task,
        "ts": ts,
        "category": category,
        **extra,
    }


def unique(items: Iterable[str]) -> list[str]:
    """The items without repeats, in first-seen order."""
    return list(dict.fromkeys(items))


def epoch(where: str, year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    """Epoch seconds of a UTC date; an impossible date is a DatasetError naming ``where``."""
    try:
        return datetime(year, month, day, hour, minute, tzinfo=timezone.utc).timestamp()
    except ValueError as error:
        raise DatasetError(f"{where}: impossible date ({error})") from error


def json_file(path: Path) -> Any:
    """The JSON value of the file ``path``."""
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    return json_text(path.read_text(encoding="utf-8"), path)


def json_list(path: Path) -> list[Any]:
    """The top-level JSON list of ``path``."""
    data = json_file(path)
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list at the top level")
    return data


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, object) of each non-blank line of a JSON Lines file."""
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            yield number, json_text(line, f"{path}:{number}")


def json_text(text: str, where: object) -> Any:
    """``text`` parsed as JSON; a DatasetError naming ``where`` when it is not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise DatasetError(f"{where}: not JSON ({error})") from error


@contextmanager
def schema(path: Path) -> Iterator[None]:
    """Turn a missing field or a value of the wrong shape into a DatasetError naming ``path``."""
    try:
        yield
    except KeyError as error:
        raise DatasetError(f"{path}: missing field {error.args[0]!r}") from error
    except (TypeError, AttributeError) as error:
        raise DatasetError(f"{path}: unexpected layout ({error})") from error

"""RealMem (AvatarMemory/RealMemBench) as a trace: the one real data set with task structure.

Each file is one persona working with an assistant on several interleaved
projects over months. The trace is what an agent that keeps a task tree would
have written:

- one namespace per persona (``limit`` counts personas, in file-name order);
- a project (``Travel_Planning_5`` of the session identifier
  ``Travel_Planning_5:S3_01``) is a top-level ``task``, titled by its words
  ("Travel Planning"); each of its stages (``S3``) is a subtask under it,
  "Travel Planning, stage 3", added when its first session starts;
- a session of a project starts with a ``focus`` on its stage: the agent knows
  which project the user has come back to. An "Enhanced" session (small talk,
  no memory points) changes nothing: the focus stays where it was;
- a session's memory points (``extracted_memory``) are known at its end: they
  are added then, under the session's stage, dated by the session's date.
  Static points become ``fact``, Schedule points ``fact``, Dynamic points
  ``event``. A point whose content is not text (one itinerary is an object) is
  written as its JSON;
- a user turn marked ``is_query`` is a question, dated by its session; its gold
  is the ``memory_used`` of the assistant turn that answers it, each resolved by
  (session uuid, content) to the memory point written earlier. A gold point not
  yet written (the question's own session) is dropped and noted; a question
  left with none is skipped. ``task`` is the stages holding the gold; the
  category is the query's ``category_name``.

Times: a session's date ("2025-12-25 (Thursday)") is midnight UTC; its turns get
their 1-based position in seconds, its memory points the seconds after the last
turn, which keeps everything in order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.loading import (
    DatasetError,
    Event,
    Report,
    add_event,
    epoch,
    focus_event,
    json_file,
    namespace_event,
    query_event,
    schema,
    unique,
)

__all__ = ["load_realmem"]

_FILES = "*_dialogues_*.json"
_SESSION = re.compile(r"(?P<project>[A-Za-z][\w]*?)_(?P<number>\d+):S(?P<stage>\d+)_\d+")
_DISTRACTOR = "Enhanced:"
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:\s*\(\w+\))?")
_TYPES = {"Static": "fact", "Dynamic": "event", "Schedule": "fact"}


def load_realmem(folder: Path, limit: int | None, report: Report) -> list[Event]:
    """Every persona of ``folder`` (the first ``limit``) as a namespace of its own."""
    files = sorted(folder.glob(_FILES))
    if not files:
        raise DatasetError(f"{folder}: no RealMem {_FILES} files")
    events: list[Event] = []
    for file in files[:limit]:
        with schema(file):
            events += _persona(file, json_file(file), report)
    return events


def _persona(file: Path, data: Mapping[str, Any], report: Report) -> list[Event]:
    persona = str(data.get("_metadata", {}).get("person_name") or file.stem.split("_dialogues")[0])
    prefix = f"realmem/{persona}"
    events: list[Event] = [namespace_event(prefix)]
    written: dict[tuple[str, str], str] = {}  # (session uuid, content) -> node id
    stage_of: dict[str, str] = {}  # node id -> the stage holding it
    added: set[str] = set()
    for number, session in enumerate(data["dialogues"]):
        where = f"{file.name} dialogue {number}"
        ts = _date(session["current_time"], where)
        turns: Sequence[Mapping[str, Any]] = session["dialogue_turns"]
        identifier = str(session["session_identifier"])
        stage = _stage(prefix, identifier, ts, added, events, report)
        for position, turn in enumerate(turns):
            if not turn.get("is_query"):
                continue
            answer = turns[position + 1] if position + 1 < len(turns) else {}
            query = _question(f"{prefix}/{session['session_uuid']}/q{position}", turn, answer, written, stage_of,
                              ts + position + 1, report)
            if query is not None:
                events.append(query)
        for position, memory in enumerate(session["extracted_memory"]):
            if stage is None:
                report.note("memory_outside_a_project", f"{where}: {identifier}")
                continue
            content = _content(memory["content"])
            key = (str(session["session_uuid"]), content)
            if key in written:
                report.note("memory_repeated", f"{where}: {memory.get('index')}")
                continue
            node = f"{prefix}/{session['session_uuid']}/m{position}"
            written[key] = node
            stage_of[node] = stage
            events.append(add_event(node, stage, _TYPES.get(str(memory.get("type")), "event"), content,
                                    ts + len(turns) + 1 + position))
    return events


def _stage(prefix: str, identifier: str, ts: float, added: set[str], events: list[Event],
           report: Report) -> str | None:
    """The node id of the session's stage, adding its project and stage nodes the
    first time and focusing it; None for a distractor session."""
    if identifier.startswith(_DISTRACTOR):
        return None
    match = _SESSION.fullmatch(identifier)
    if match is None:
        report.note("session_identifier_unreadable", identifier)
        return None
    title = match["project"].replace("_", " ")
    project = f"{prefix}/{match['project']}_{match['number']}"
    stage = f"{project}/S{int(match['stage'])}"
    if project not in added:
        added.add(project)
        events.append(add_event(project, None, "task", title, ts))
    if stage not in added:
        added.add(stage)
        events.append(add_event(stage, project, "task", f"{title}, stage {int(match['stage'])}", ts))
    events.append(focus_event(stage))
    return stage


def _question(query_id: str, turn: Mapping[str, Any], answer: Mapping[str, Any],
              written: Mapping[tuple[str, str], str], stage_of: Mapping[str, str], ts: float,
              report: Report) -> Event | None:
    gold: list[str] = []
    for used in answer.get("memory_used") or []:
        node = written.get((str(used["session_uuid"]), _content(used["content"])))
        if node is None:
            report.note("gold_not_yet_written", query_id)
        else:
            gold.append(node)
    gold = unique(gold)
    if not gold:
        report.note("question_no_gold", query_id)
        return None
    return query_event(query_id, str(turn["content"]), gold, unique(stage_of[g] for g in gold), ts,
                       str(turn.get("category_name") or "all"))


def _content(value: object) -> str:
    """A memory point's text; an object (an itinerary) as its JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _date(value: object, where: str) -> float:
    match = _DATE.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise DatasetError(f"{where}: unreadable date {value!r}")
    return epoch(where, *(int(group) for group in match.groups()))

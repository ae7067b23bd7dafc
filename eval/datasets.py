"""The real evaluation data sets (LoCoMo, LongMemEval, MADial-Bench, MemDaily, RealMem) as traces.

    load("locomo")                        # the events, ready to replay
    events, report = load_with_report("longmemeval", limit=20)
    python -m eval.datasets memdaily --out memdaily.jsonl

The data stay where they are (``$HYBRID_MEMORY_EVAL_DATA``, else ``../shared/data``
beside the repository): their licences are not the project's, so nothing here or
in the tests holds a copy. Every loader turns its data set into the events of
the trace format: ``namespace`` (a fresh, empty memory), ``add`` (one node) and
``query`` (a question with the ids of the nodes it needs, ``gold``, and of the
task branches holding them, ``task``). Node ids carry their unit's name as a
prefix, so they are unique across the whole trace.

Shape, one branch per session or trajectory: a root ``task`` node whose ``ts``
is the session's date, its turns as ``event`` children in order. Turns that
have no time of their own get the session's time plus their 1-based position
in seconds, which keeps their order. A memory's queries follow all of its adds;
a query's ``ts`` is the question's date when the data set has one, else one
second after the memory's last add. Dates are read as UTC. Queries also carry
``answer`` (and MemDaily's ``subcategory``): extra fields, which a replay ignores.

Per data set (``limit`` caps the independent units, for quick runs):

- ``locomo``: one namespace per conversation; ``limit`` counts conversations.
  Turns read "<speaker>: <text>", plus " [shares an image: <caption>]" when the
  turn carries one. Sessions with a date but no turns are skipped. Adversarial
  questions (category 5, no answer) are skipped; the others keep their number
  in the category ("1-multi-hop", "2-temporal", "3-open-domain", "4-single-hop").
  Evidence is normalised only where the intent is unambiguous: a string is
  split on ";", "," and spaces ("D8:6; D9:17" -> two ids), "D:11:26" loses the
  stray colon and leading zeros go ("D30:05" -> "D30:5"). A piece that is
  still not "D<n>:<m>" ("D") or names no turn of the conversation is dropped,
  and a question left with no evidence is skipped.
- ``longmemeval`` (oracle): one namespace per question; ``limit`` counts kept
  questions. Abstention questions (id ending "_abs") are skipped. Its sessions
  are added in date order (the file does not always list them so), turns read
  "user: ..." / "assistant: ...". The assistant's turns are written with
  importance ``ASSISTANT_IMPORTANCE`` (0.3), the user's with the type's default
  (0.5), as a chat agent should write a conversation into its memory: what the
  user says about themselves cannot be had again, the agent's own replies (long,
  general advice) can. Gold is the turns marked ``has_answer``; a question with
  none is skipped. The category is ``question_type``.
- ``memdaily`` (Chinese): every trajectory of every file in ONE namespace, one
  branch per trajectory, so that each question is asked against all of them;
  ``limit`` counts trajectories per file, so every category stays present.
  Ids are prefixed with the file's stem (tids repeat across files). Messages
  keep their own times and their file order. The category and subcategory
  come from the file name: "05_post_processing_events" -> "post_processing",
  "events".
- ``madial`` (English): ONE namespace holding the memory bank, one branch per
  scene ("Activity", "Preferences", ...), each memory an event dated by its
  day, oldest first; the memory file has no user field, so both users' memories
  form one bank, as the file has them.
  Each dialogue is one query; ``limit`` counts dialogues. The query text is the
  last three lines before the first test turn (the assistant's reply that
  should use the memories, so it is left out); gold is ``relevant-id``.
  The data set has no question categories: every query is "memory-recall".
- ``realmem`` (English, the one set with task structure): one namespace per
  persona, projects as tasks and their stages as subtasks, each project
  session focusing its stage; see :mod:`eval.realmem`.

What a loader normalised, dropped or skipped is counted in the Report that
``load_with_report`` returns, with a few examples of each kind.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from itertools import islice
from pathlib import Path
from typing import Any

from eval.loading import (
    DatasetError,
    Event,
    Report,
    add_event,
    epoch,
    json_lines,
    json_list,
    namespace_event,
    query_event,
    schema,
    unique,
)
from eval.realmem import load_realmem
from hybrid_memory.evaluation.trace import TraceError, read_trace, write_trace

__all__ = [
    "ASSISTANT_IMPORTANCE",
    "DATASETS",
    "DatasetError",
    "Report",
    "TraceError",
    "default_data_dir",
    "load",
    "load_with_report",
    "read_trace",
    "write_trace",
]

DATASETS = ("locomo", "longmemeval", "madial", "memdaily", "realmem")
#: The importance of an assistant's turn in a user-assistant chat (LongMemEval): below
#: an event's default (0.5), so that the user's own statements outrank the replies.
ASSISTANT_IMPORTANCE = 0.3
DATA_ENV = "HYBRID_MEMORY_EVAL_DATA"


def default_data_dir() -> Path:
    """The folder holding the data set folders: $HYBRID_MEMORY_EVAL_DATA, else ../shared/data."""
    configured = os.environ.get(DATA_ENV)
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def load(name: str, data_dir: str | Path | None = None, *, limit: int | None = None) -> list[Event]:
    """The trace of data set ``name`` (one of DATASETS) read from ``data_dir``."""
    return load_with_report(name, data_dir, limit=limit)[0]


def load_with_report(
    name: str, data_dir: str | Path | None = None, *, limit: int | None = None
) -> tuple[list[Event], Report]:
    """The trace of data set ``name`` and the Report of what loading it changed or left out."""
    if name not in _LOADERS:
        raise DatasetError(f"unknown data set {name!r}; expected one of {', '.join(DATASETS)}")
    if limit is not None and limit < 1:
        raise DatasetError(f"limit must be a positive number of units, got {limit}")
    relative, loader = _LOADERS[name]
    path = Path(data_dir if data_dir is not None else default_data_dir()) / relative
    report = Report()
    with schema(path):
        events = loader(path, limit, report)
    _note_early_queries(events, report)
    return events, report


# -- LoCoMo -------------------------------------------------------------------------------

_LOCOMO_CATEGORIES = {1: "1-multi-hop", 2: "2-temporal", 3: "3-open-domain", 4: "4-single-hop"}
_LOCOMO_ADVERSARIAL = 5
_LOCOMO_SESSION_KEY = re.compile(r"session_(\d+)(?:_date_time)?")
_LOCOMO_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*([ap])m on (\d{1,2}) ([a-z]+),? (\d{4})", re.I)
_MONTHS = (
    "january february march april may june july august september october november december".split()
)
_EVIDENCE_SEPARATORS = re.compile(r"[;,\s]+")
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")


def _locomo(path: Path, limit: int | None, report: Report) -> list[Event]:
    """One namespace per conversation, the first ``limit`` of them."""
    return [e for sample in json_list(path)[:limit] for e in _locomo_conversation(sample, report)]


def _locomo_conversation(sample: Mapping[str, Any], report: Report) -> list[Event]:
    """A conversation's sessions as branches, then its answerable questions."""
    name = sample["sample_id"]
    conversation = sample["conversation"]
    events = [namespace_event(name)]
    session_of: dict[str, str] = {}  # dia_id -> the node id of its session
    for number in _locomo_session_numbers(conversation):
        turns = conversation.get(f"session_{number}")
        if not turns:
            report.note("session_empty", f"{name}/session_{number}")
            continue
        events += _locomo_session(name, number, conversation, turns)
        session_of.update((turn["dia_id"], f"{name}/session_{number}") for turn in turns)
    query_ts = _after_last_add(events)
    for index, qa in enumerate(sample["qa"]):
        query = _locomo_query(f"{name}/q{index}", qa, name, session_of, query_ts, report)
        if query is not None:
            events.append(query)
    return events


def _locomo_session_numbers(conversation: Mapping[str, Any]) -> list[int]:
    """The session numbers named by the conversation's keys (turns or date), ascending."""
    found = (_LOCOMO_SESSION_KEY.fullmatch(key) for key in conversation)
    return sorted({int(match[1]) for match in found if match})


def _locomo_session(
    name: str, number: int, conversation: Mapping[str, Any], turns: list[Mapping[str, Any]]
) -> list[Event]:
    """The session's task node, then its turns in order."""
    date = conversation[f"session_{number}_date_time"]
    ts = _locomo_ts(date, f"{name} session_{number}_date_time")
    session = f"{name}/session_{number}"
    speakers = f"{conversation['speaker_a']} and {conversation['speaker_b']}"
    content = f"Session {number} of {speakers}, {date}"
    events = [add_event(session, None, "task", content, ts)]
    for position, turn in enumerate(turns, start=1):
        events.append(
            add_event(f"{name}/{turn['dia_id']}", session, "event", _locomo_turn(turn), ts + position)
        )
    return events


def _locomo_turn(turn: Mapping[str, Any]) -> str:
    """'<speaker>: <text>', with the caption of a shared image when there is one."""
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    return f"{text} [shares an image: {caption}]" if caption else text


def _locomo_ts(date: object, where: str) -> float:
    """Epoch seconds of a LoCoMo date such as '1:56 pm on 8 May, 2023'."""
    match = _LOCOMO_DATE.fullmatch(date.strip()) if isinstance(date, str) else None
    if match is None or match[5].lower() not in _MONTHS:
        raise DatasetError(f"{where}: unreadable date {date!r}")
    hour = int(match[1]) % 12 + (12 if match[3].lower() == "p" else 0)
    month = _MONTHS.index(match[5].lower()) + 1
    return epoch(where, int(match[6]), month, int(match[4]), hour, int(match[2]))


def _locomo_query(
    query_id: str,
    qa: Mapping[str, Any],
    name: str,
    session_of: Mapping[str, str],
    ts: float,
    report: Report,
) -> Event | None:
    """The question as a query event, or None when it is adversarial or has no usable evidence."""
    category = qa["category"]
    if category == _LOCOMO_ADVERSARIAL:
        report.note("question_adversarial", query_id)
        return None
    if category not in _LOCOMO_CATEGORIES:
        raise DatasetError(f"{query_id}: unknown category {category!r}")
    gold = _locomo_gold(query_id, qa["evidence"], session_of, report)
    if not gold:
        report.note("question_no_gold", f"{query_id}: evidence {qa['evidence']!r}")
        return None
    task = unique(session_of[dia_id] for dia_id in gold)
    return query_event(
        query_id,
        qa["question"],
        [f"{name}/{dia_id}" for dia_id in gold],
        task,
        ts,
        _LOCOMO_CATEGORIES[category],
        answer=str(qa["answer"]),
    )


def _locomo_gold(
    query_id: str, evidence: list[str], known: Mapping[str, str], report: Report
) -> list[str]:
    """The dia_ids the evidence names, normalised where unambiguous (see the module notes)."""
    gold: list[str] = []
    for raw in evidence:
        pieces = [piece for piece in _EVIDENCE_SEPARATORS.split(raw) if piece]
        if len(pieces) > 1:
            report.note("evidence_split", f"{query_id}: {raw!r}")
        for piece in pieces:
            match = _DIA_ID.fullmatch(piece)
            if match is None:
                report.note("evidence_malformed", f"{query_id}: {piece!r}")
                continue
            dia_id = f"D{int(match[1])}:{int(match[2])}"
            if dia_id != piece:
                report.note("evidence_reformatted", f"{query_id}: {piece!r} -> {dia_id!r}")
            if dia_id not in known:
                report.note("evidence_unknown", f"{query_id}: {dia_id!r}")
            elif dia_id not in gold:
                gold.append(dia_id)
    return gold


# -- LongMemEval --------------------------------------------------------------------------

_LONGMEMEVAL_DATE = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2}) \(\w+\) (\d{1,2}):(\d{2})")


def _longmemeval(path: Path, limit: int | None, report: Report) -> list[Event]:
    """One namespace per kept question, the first ``limit`` of them."""
    units = (_longmemeval_question(question, report) for question in json_list(path))
    return [e for unit in islice((u for u in units if u), limit) for e in unit]


def _longmemeval_question(question: Mapping[str, Any], report: Report) -> list[Event] | None:
    """The question's haystack sessions as branches and the question itself, or None when
    it is an abstention question or no turn holds its answer."""
    qid = question["question_id"]
    if qid.endswith("_abs"):
        report.note("question_abstention", qid)
        return None
    events = [namespace_event(qid)]
    gold: list[str] = []
    task: list[str] = []
    for ts, session_id, date, turns in _longmemeval_sessions(question, report):
        session = f"{qid}/{session_id}"
        content = f"Chat session, {date}"
        events.append(add_event(session, None, "task", content, ts))
        for position, turn in enumerate(turns, start=1):
            node = f"{session}:{position}"
            content = f"{turn['role']}: {turn['content']}"
            events.append(add_event(node, session, "event", content, ts + position))
            if turn["role"] == "assistant":
                events[-1]["importance"] = ASSISTANT_IMPORTANCE
            if turn.get("has_answer", False):
                gold.append(node)
                if session not in task:
                    task.append(session)
    if not gold:
        report.note("question_no_gold", qid)
        return None
    ts = _numeric_ts(_LONGMEMEVAL_DATE, question["question_date"], f"{qid} question_date")
    events.append(
        query_event(
            qid,
            question["question"],
            gold,
            task,
            ts,
            question["question_type"],
            answer=str(question["answer"]),
        )
    )
    return events


def _longmemeval_sessions(
    question: Mapping[str, Any], report: Report
) -> list[tuple[float, str, str, list[Mapping[str, Any]]]]:
    """(ts, session id, date, turns) of each haystack session, in date order."""
    qid = question["question_id"]
    columns = ("haystack_session_ids", "haystack_dates", "haystack_sessions")
    ids, dates, sessions = (question[column] for column in columns)
    if not len(ids) == len(dates) == len(sessions):
        raise DatasetError(f"{qid}: {', '.join(columns)} differ in length")
    times = [_numeric_ts(_LONGMEMEVAL_DATE, date, f"{qid} haystack_dates") for date in dates]
    rows = list(zip(times, ids, dates, sessions, strict=True))
    ordered = sorted(rows, key=lambda row: row[0])  # stable: same-time sessions keep file order
    if ordered != rows:
        report.note("sessions_reordered", qid)
    return ordered


# -- MemDaily -----------------------------------------------------------------------------

_MEMDAILY_NAMESPACE = "memdaily"
_MEMDAILY_FILE = re.compile(r"\d+_(.+)_([^_]+)")
_MEMDAILY_DATE = re.compile(r"(\d{4})年(\d{1,2})月(\d{1,2})日 \S+ (\d{1,2}):(\d{2})")


def _memdaily(folder: Path, limit: int | None, report: Report) -> list[Event]:
    """One namespace: the first ``limit`` trajectories of each file as branches, then
    every question."""
    files = sorted(folder.glob("*.json"))
    if not files:
        raise DatasetError(f"{folder}: no MemDaily *.json files")
    adds: list[Event] = []
    queries: list[Event] = []
    for file in files:
        with schema(file):
            for trajectory in json_list(file)[:limit]:
                branch, questions = _memdaily_trajectory(file, trajectory, report)
                adds += branch
                queries += questions
    return [namespace_event(_MEMDAILY_NAMESPACE), *adds, *queries]


def _memdaily_trajectory(
    file: Path, trajectory: Mapping[str, Any], report: Report
) -> tuple[list[Event], list[Event]]:
    """The trajectory's branch (task node, then its messages) and its questions."""
    category, subcategory = _memdaily_kind(file)
    branch = f"{file.stem}/t{trajectory['tid']}"
    messages = trajectory["message_list"]
    if not messages:
        raise DatasetError(f"{file}: trajectory {trajectory['tid']} has no messages")
    times = [_numeric_ts(_MEMDAILY_DATE, m["time"], f"{branch}/m{m['mid']}") for m in messages]
    if times != sorted(times):
        report.note("messages_out_of_time_order", branch)
    first = messages[0]
    content = f"日常记录（{first['place']}，{first['time'].split()[0]}起）"
    adds = [add_event(branch, None, "task", content, min(times))]
    node_of: dict[Any, str] = {}  # mid -> node id
    for message, ts in zip(messages, times, strict=True):
        node_of[message["mid"]] = f"{branch}/m{message['mid']}"
        adds.append(add_event(node_of[message["mid"]], branch, "event", message["message"], ts))
    queries = []
    for question in trajectory["question_list"]:
        query_id = f"{branch}/q{question['qid']}"
        gold = _memdaily_gold(query_id, question["target_step_id"], node_of, report)
        if not gold:
            report.note("question_no_gold", query_id)
            continue
        ts = _numeric_ts(_MEMDAILY_DATE, question["time"], f"{query_id} time")
        queries.append(
            query_event(
                query_id,
                question["question"],
                gold,
                [branch],
                ts,
                category,
                subcategory=subcategory,
                answer=str(question["answer"]),
            )
        )
    return adds, queries


def _memdaily_kind(file: Path) -> tuple[str, str]:
    """(category, subcategory) from a file name such as '05_post_processing_events.json'."""
    match = _MEMDAILY_FILE.fullmatch(file.stem)
    if match is None:
        raise DatasetError(f"{file}: expected a name like 01_simple_events.json")
    return match[1], match[2]


def _memdaily_gold(
    query_id: str, steps: list[Any], node_of: Mapping[Any, str], report: Report
) -> list[str]:
    """The node ids of the target messages; a step naming no message is dropped."""
    for step in steps:
        if step not in node_of:
            report.note("target_step_unknown", f"{query_id}: {step!r}")
    return unique(node_of[step] for step in steps if step in node_of)


# -- MADial-Bench -------------------------------------------------------------------------

_MADIAL_NAMESPACE = "madial"
_MADIAL_MEMORIES = "MADial-Bench-en-memory.json"
_MADIAL_DIALOGUES = "MADial-Bench-en-dialogue.json"
_MADIAL_DATE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_MADIAL_CONTEXT_LINES = 3  # the user's last line and the exchange before it
_MADIAL_MARKERS = frozenset({"<BOD>", "<EOD>"})
_MADIAL_LINE = re.compile(r'<([^<>:]+)>:\s*"?(.*?)"?')


def _madial(folder: Path, limit: int | None, report: Report) -> list[Event]:
    """One namespace: the memory bank by scene, then the first ``limit`` dialogues as queries."""
    events = [namespace_event(_MADIAL_NAMESPACE)]
    scene_of: dict[str, str] = {}  # memory id -> the node id of its scene
    for memory_id, memory, ts in _madial_memories(folder / _MADIAL_MEMORIES):
        scene = f"{_MADIAL_NAMESPACE}/scene:{memory['scene']}"
        if scene not in scene_of.values():  # a scene's node comes with its oldest memory
            events.append(add_event(scene, None, "task", f"Memories: {memory['scene']}", ts))
        scene_of[memory_id] = scene
        events.append(add_event(_madial_node(memory_id), scene, "event", memory["event"], ts))
    query_ts = _after_last_add(events)
    path = folder / _MADIAL_DIALOGUES
    queries = (
        _madial_query(f"{path}:{number}", number, dialogue, scene_of, query_ts, report)
        for number, dialogue in json_lines(path)
    )
    return events + list(islice((q for q in queries if q), limit))


def _madial_memories(path: Path) -> list[tuple[str, Mapping[str, Any], float]]:
    """(id, memory, ts) of every memory in the bank, oldest first (file order among equals)."""
    memories: dict[str, tuple[str, Mapping[str, Any], float]] = {}
    for number, line in json_lines(path):
        for memory_id, memory in line.items():
            if memory_id in memories:
                raise DatasetError(f"{path}:{number}: memory id {memory_id!r} repeats")
            ts = _numeric_ts(_MADIAL_DATE, memory["time"], f"{path}:{number} time")
            memories[memory_id] = (memory_id, memory, ts)
    return sorted(memories.values(), key=lambda row: row[2])


def _madial_query(
    where: str,
    number: int,
    dialogue: Mapping[str, Any],
    scene_of: Mapping[str, str],
    ts: float,
    report: Report,
) -> Event | None:
    """The dialogue up to its first test turn as a query for its relevant memories, or None
    when none of them is in the bank."""
    query_id = f"{_MADIAL_NAMESPACE}/d{number}"
    lines = dialogue["dialogue"]
    turn = min(dialogue["test-turn"])
    if not 0 < turn < len(lines):
        raise DatasetError(f"{where}: test-turn {turn} is outside the dialogue")
    spoken = [_madial_line(line) for line in lines[:turn] if line.strip() not in _MADIAL_MARKERS]
    relevant = unique(map(str, dialogue["relevant-id"]))
    for memory_id in relevant:
        if memory_id not in scene_of:
            report.note("relevant_id_unknown", f"{query_id}: {memory_id}")
    found = [memory_id for memory_id in relevant if memory_id in scene_of]
    if not found:
        report.note("question_no_gold", query_id)
        return None
    text = "\n".join(spoken[-_MADIAL_CONTEXT_LINES:])
    gold = [_madial_node(memory_id) for memory_id in found]
    return query_event(query_id, text, gold, unique(scene_of[m] for m in found), ts, "memory-recall")


def _madial_node(memory_id: str) -> str:
    return f"{_MADIAL_NAMESPACE}/m{memory_id}"


def _madial_line(line: str) -> str:
    """'<Bart>: "Hi!"' -> 'Bart: Hi!'; a line not in that form is kept as it is, stripped."""
    match = _MADIAL_LINE.fullmatch(line.strip())
    return f"{match[1]}: {match[2]}" if match else line.strip()


# -- shared -------------------------------------------------------------------------------

Loader = Callable[[Path, int | None, Report], list[Event]]

_LOADERS: dict[str, tuple[str, Loader]] = {
    "locomo": ("locomo/locomo_dev.json", _locomo),
    "longmemeval": ("longmemeval/longmemeval_oracle_dev.json", _longmemeval),
    "madial": ("madial_bench/en", _madial),
    "memdaily": ("memdaily", _memdaily),
    "realmem": ("realmem", load_realmem),
}


def _after_last_add(events: list[Event]) -> float:
    """One second after the latest add: the time of questions the data set does not date."""
    return float(max(e["ts"] for e in events if e["op"] == "add")) + 1.0


def _numeric_ts(pattern: re.Pattern[str], date: object, where: str) -> float:
    """Epoch seconds of a date whose pattern captures year, month, day[, hour, minute]."""
    match = pattern.fullmatch(date.strip()) if isinstance(date, str) else None
    if match is None:
        raise DatasetError(f"{where}: unreadable date {date!r}")
    return epoch(where, *(int(group) for group in match.groups()))


def _note_early_queries(events: list[Event], report: Report) -> None:
    """Note queries dated before an add of their own memory: the data's dates allow it (a
    session logged after the question), and recency then sees a node from the future."""
    latest = float("-inf")
    for event in events:
        if event["op"] == "namespace":
            latest = float("-inf")
        elif event["op"] == "add":
            latest = max(latest, event["ts"])
        elif event["op"] == "query" and event["ts"] < latest:
            report.note("query_before_last_add", event["id"])


# -- command line -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Print what a data set turns into and, with --out, write its trace."""
    parser = argparse.ArgumentParser(prog="python -m eval.datasets", description=main.__doc__)
    parser.add_argument("name", choices=DATASETS)
    parser.add_argument(
        "--data", type=Path, help=f"the data folder (default: ${DATA_ENV} or ../shared/data)"
    )
    parser.add_argument("--limit", type=int, help="at most this many units (see the module notes)")
    parser.add_argument("--out", type=Path, help="write the trace here as JSON Lines")
    args = parser.parse_args(argv)
    try:
        events, report = load_with_report(args.name, args.data, limit=args.limit)
    except DatasetError as error:
        sys.exit(f"error: {error}")
    ops = Counter(event["op"] for event in events)
    print(f"{args.name}: {ops['namespace']} namespaces, {ops['add']} adds, {ops['query']} queries")
    for kind, count in sorted(report.counts.items()):
        print(f"  {kind}: {count}  e.g. {'; '.join(report.examples[kind])}")
    if args.out:
        write_trace(events, args.out)


if __name__ == "__main__":
    main()

"""Transcripts as sessions of messages: reading the files users bring.

:func:`read` takes a file's text and name and returns a :class:`Transcript`, or
raises :class:`IngestError` naming the line (JSON Lines, plain text) or the element
(JSON) that cannot be read. It reads:

- **messages** (OpenAI style): a JSON list of messages, an object with ``messages``,
  a list of such objects (one session each), or JSON Lines of messages or of such
  objects. A message has its text in ``content`` (a string, or a list of parts with
  ``text``), ``text`` or ``message``; its speaker in ``speaker``, ``role``, ``author``
  or ``name``; its time, if any, in ``timestamp``, ``created_at``, ``create_time``,
  ``time``, ``ts`` or ``date``; its id, if any, in ``id``, ``message_id`` or
  ``dia_id``. Messages naming a ``session``, ``session_id``, ``conversation_id`` or
  ``thread_id`` are grouped by it; otherwise the file is one session.
- **sessions**: an object with ``sessions`` (each with ``messages`` or ``turns``, and
  optionally ``id``, ``title`` and ``date``); LoCoMo-style conversations
  (``conversation`` with ``session_<n>`` turns and ``session_<n>_date_time``); and
  LongMemEval-style items (``haystack_sessions`` with their dates and ids, sessions
  in date order; a session two items share is read once).
- **text**: plain text, one message per paragraph (blank lines between them).

A message reads "speaker: text" (just the text without a speaker). Its key, unique in
the transcript, is its own id or its place in its session; a session's key is its
own id or its place in the file. Keys are what make ingesting twice write nothing
twice. Times are read by :mod:`hybrid_memory.ingest.times`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import IngestError
from . import times

FORMATS = ("auto", "messages", "sessions", "text")

_TEXT = ("content", "text", "message")
_SPEAKER = ("speaker", "role", "author", "name")
_TIME = ("timestamp", "created_at", "create_time", "time", "ts", "date")
_ID = ("id", "message_id", "dia_id")
_GROUP = ("session", "session_id", "conversation_id", "thread_id")
_LOCOMO_SESSION = re.compile(r"session_(\d+)")


@dataclass(frozen=True)
class Message:
    key: str
    speaker: str
    text: str
    ts: float | None
    #: Where it is in the file: "chat.jsonl:17" or "chat.json: messages[3]".
    where: str

    @property
    def content(self) -> str:
        return f"{self.speaker}: {self.text}" if self.speaker else self.text


@dataclass(frozen=True)
class Session:
    key: str
    title: str
    ts: float | None
    messages: tuple[Message, ...]


@dataclass(frozen=True)
class Transcript:
    name: str
    #: "messages", "sessions" or "text": how the file was read.
    format: str
    sessions: tuple[Session, ...]
    #: Messages without text (a tool call, an empty turn), left out.
    empty: int = 0


def read(text: str, name: str, format: str = "auto") -> Transcript:
    """The transcript in ``text`` (a file's contents; ``name`` names it in errors and
    keys). ``format``: one of :data:`FORMATS` ("auto" chooses by name and content)."""
    if format not in FORMATS:
        raise IngestError(name, f"unknown format {format!r}; choose from {', '.join(FORMATS)}")
    if "\x00" in text:
        raise IngestError(name, "holds a NUL character: not a text file")
    if format == "text" or (format == "auto" and not _looks_json(text, name)):
        return _text(text, name)
    value = _one_value(text, name)
    sessions, empty, kind = _json_lines(text, name) if value is _LINES else _json(value, name)
    if format != "auto" and kind != format:
        raise IngestError(name, f"reads as {kind}, not {format}")
    if not sessions:
        raise IngestError(name, "holds no message")
    return Transcript(name, kind, tuple(sessions), empty)


def _looks_json(text: str, name: str) -> bool:
    return name.lower().endswith((".json", ".jsonl", ".ndjson")) or text.lstrip()[:1] in ("[", "{")


_LINES = object()  # what _one_value says of JSON Lines


def _one_value(text: str, name: str) -> Any:
    """The one JSON value ``text`` holds, or ``_LINES`` when it is JSON Lines: by the
    file's name, else by whether it parses as one value. A ".json" file that does not
    parse is refused with the line at fault."""
    if name.lower().endswith((".jsonl", ".ndjson")):
        return _LINES
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if name.lower().endswith(".json"):
            raise IngestError(f"{name}:{exc.lineno}", f"not JSON ({exc.msg})") from None
        return _LINES


# -- JSON -------------------------------------------------------------------------------


def _json(data: Any, name: str) -> tuple[list[Session], int, str]:
    if isinstance(data, Mapping) and "conversation" in data:
        data = [data]
    if isinstance(data, list) and data and all(isinstance(d, Mapping) and "conversation" in d for d in data):
        return [s for i, d in enumerate(data) for s in _locomo(d, f"{name}: [{i}]", i)], 0, "sessions"
    if isinstance(data, list) and data and all(isinstance(d, Mapping) and "haystack_sessions" in d for d in data):
        return _longmemeval(data, name), 0, "sessions"
    if isinstance(data, Mapping) and "sessions" in data:
        return (*_sessions(data["sessions"], f"{name}: sessions"), "sessions")
    if isinstance(data, Mapping) and "messages" in data:
        data = [data]
    if isinstance(data, list) and data and all(isinstance(d, Mapping) and "messages" in d for d in data):
        return (*_sessions(data, name), "messages")
    if isinstance(data, list):
        return (*_grouped([(f"{name}: [{i}]", m) for i, m in enumerate(data)]), "messages")
    raise IngestError(name, "expected a list of messages, an object with messages or sessions, "
                            "or LoCoMo / LongMemEval items")


def _json_lines(text: str, name: str) -> tuple[list[Session], int, str]:
    rows: list[tuple[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((f"{name}:{number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise IngestError(f"{name}:{number}", f"not JSON ({exc.msg})") from None
    conversations = [isinstance(row, Mapping) and "messages" in row for _, row in rows]
    if rows and all(conversations):
        sessions: list[Session] = []
        empty = 0
        for i, (where, row) in enumerate(rows):
            made, left = _session(row, where, f"session_{i + 1}", row.get("messages"), f"{where}: messages")
            sessions.append(made)
            empty += left
        return sessions, empty, "messages"
    if any(conversations):
        where = rows[conversations.index(not conversations[0])][0]
        raise IngestError(where, "mixes whole conversations (with messages) and single messages")
    return (*_grouped(rows), "messages")


def _sessions(items: object, where: str) -> tuple[list[Session], int]:
    if not isinstance(items, list):
        raise IngestError(where, "expected a list of sessions")
    out: list[Session] = []
    empty = 0
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise IngestError(at, "a session must be an object")
        turns = item.get("messages", item.get("turns"))
        made, left = _session(item, at, f"session_{i + 1}", turns, f"{at}.messages")
        out.append(made)
        empty += left
    return out, empty


def _session(item: Mapping[str, Any], where: str, default_key: str, turns: object,
             turns_at: str) -> tuple[Session, int]:
    """One session object: its messages (``turns``), key, time and title."""
    if not isinstance(turns, list):
        raise IngestError(where, "a session needs a list of messages (or turns)")
    key = _key(item.get("id"), default_key)
    when = _time_of(item, where)
    rows = [(f"{turns_at}[{j}]", m) for j, m in enumerate(turns)]
    messages, empty = _messages(rows, key, when)
    title = item.get("title")
    if title is not None and not isinstance(title, str):
        raise IngestError(where, "title must be text")
    date = item.get("date")
    return Session(key, title or _title(date if isinstance(date, str) else None, when, messages, key),
                   when if when is not None else _first_time(messages), tuple(messages)), empty


def _grouped(rows: Sequence[tuple[str, Any]]) -> tuple[list[Session], int]:
    """Messages, grouped in sessions by the field that names one (one session without)."""
    groups: dict[str, list[tuple[str, Any]]] = {}
    for where, row in rows:
        if not isinstance(row, Mapping):
            raise IngestError(where, "a message must be an object")
        group = next((row[g] for g in _GROUP if row.get(g) is not None), "session_1")
        groups.setdefault(str(group), []).append((where, row))
    out: list[Session] = []
    empty = 0
    for key, members in groups.items():
        messages, left = _messages(members, key, None)
        empty += left
        if messages:
            out.append(Session(key, _title(None, None, messages, key), _first_time(messages), tuple(messages)))
    return out, empty


def _messages(rows: Sequence[tuple[str, Any]], session: str, start: float | None) -> tuple[list[Message], int]:
    """The messages of one session (``start``: its time, which a message without a
    time of its own follows by its position in seconds), and how many were empty."""
    out: list[Message] = []
    empty = 0
    for position, (where, row) in enumerate(rows, start=1):
        if not isinstance(row, Mapping):
            raise IngestError(where, "a message must be an object")
        text = _text_of(row, where)
        if not text.strip():
            empty += 1
            continue
        speaker = next((row[s] for s in _SPEAKER if isinstance(row.get(s), str) and row[s].strip()), "")
        own = _time_of(row, where)
        ts = own if own is not None else (start + position if start is not None else None)
        out.append(Message(f"{session}/{_key(next((row[i] for i in _ID if row.get(i) is not None), None), str(position))}",
                           str(speaker).strip(), text, ts, where))
    return out, empty


def _text_of(row: Mapping[str, Any], where: str) -> str:
    value = next((row[t] for t in _TEXT if t in row), None)
    if value is None:
        return ""
    if isinstance(value, list):  # OpenAI content parts (an image part has no text)
        parts = [p if isinstance(p, str) else p.get("text") if isinstance(p, Mapping) else p for p in value]
        if not all(p is None or isinstance(p, str) for p in parts):
            raise IngestError(where, "a content part must be text or an object with text")
        return "\n".join(p for p in parts if p)
    if not isinstance(value, str):
        raise IngestError(where, f"a message's text must be text, not {type(value).__name__}")
    return value


def _time_of(row: Mapping[str, Any], where: str) -> float | None:
    field_ = next((t for t in _TIME if row.get(t) is not None), None)
    if field_ is None:
        return None
    ts = times.parse(row[field_])
    if ts is None:
        raise IngestError(where, f"unreadable time in {field_!r}: {row[field_]!r:.60}")
    return ts


def _key(value: object, default: str) -> str:
    if value is None:
        return default
    if not isinstance(value, (str, int)) or isinstance(value, bool) or not str(value).strip():
        raise IngestError(default, f"an id must be text or a number, got {value!r:.40}")
    return str(value).strip()


def _first_time(messages: Sequence[Message]) -> float | None:
    return next((m.ts for m in messages if m.ts is not None), None)


def _title(date: str | None, when: float | None, messages: Sequence[Message], key: str) -> str:
    if date is not None:
        return f"Chat session, {date}"
    first = when if when is not None else _first_time(messages)
    return f"Chat session, {times.show(first)}" if first is not None else f"Chat session {key}"


# -- the public data sets' shapes --------------------------------------------------------


def _locomo(sample: Mapping[str, Any], where: str, index: int) -> Iterator[Session]:
    """A LoCoMo-style conversation: its sessions in number order, turns "speaker: text"
    (with the caption of a shared image), each turn one second after the one before."""
    conversation = sample["conversation"]
    if not isinstance(conversation, Mapping):
        raise IngestError(where, "conversation must be an object")
    name = str(sample.get("sample_id") or f"conversation_{index + 1}")
    speakers = " and ".join(str(conversation[s]) for s in ("speaker_a", "speaker_b") if conversation.get(s))
    numbers = sorted({int(m[1]) for m in map(_LOCOMO_SESSION.fullmatch, conversation) if m})
    for number in numbers:
        turns = conversation.get(f"session_{number}")
        if not turns:
            continue
        at = f"{where}.conversation.session_{number}"
        date = conversation.get(f"session_{number}_date_time")
        ts = times.parse(date)
        if ts is None:
            raise IngestError(f"{at}_date_time", f"unreadable date {date!r:.60}")
        if not isinstance(turns, list):
            raise IngestError(at, "expected a list of turns")
        messages = []
        for position, turn in enumerate(turns, start=1):
            if not isinstance(turn, Mapping) or not isinstance(turn.get("text"), str) or "dia_id" not in turn:
                raise IngestError(f"{at}[{position - 1}]", "a turn needs text and a dia_id")
            text = turn["text"] + (f" [shares an image: {turn['blip_caption']}]" if turn.get("blip_caption") else "")
            messages.append(Message(f"{name}/{turn['dia_id']}", str(turn.get("speaker") or ""), text, ts + position,
                                    f"{at}[{position - 1}]"))
        of = f" of {speakers}" if speakers else ""
        yield Session(f"{name}/session_{number}", f"Session {number}{of}, {date}", ts, tuple(messages))


def _longmemeval(items: Sequence[Mapping[str, Any]], name: str) -> list[Session]:
    """LongMemEval-style items: every haystack session once, in date order."""
    out: dict[str, Session] = {}
    for i, item in enumerate(items):
        where = f"{name}: [{i}]"
        columns = [_listed(item.get(c), f"{where}.{c}") for c in
                   ("haystack_session_ids", "haystack_dates", "haystack_sessions")]
        if len({len(c) for c in columns}) != 1:
            raise IngestError(where, "haystack_session_ids, haystack_dates and haystack_sessions differ in length")
        for j, (sid, date, turns) in enumerate(zip(*columns, strict=True)):
            at = f"{where}.haystack_sessions[{j}]"
            ts = times.parse(date)
            if ts is None:
                raise IngestError(f"{where}.haystack_dates[{j}]", f"unreadable date {date!r:.60}")
            key = _key(sid, f"session_{len(out) + 1}")
            if key in out:
                continue
            rows = [(f"{at}[{k}]", t) for k, t in enumerate(_listed(turns, at))]
            messages, _ = _messages(rows, key, ts)
            out[key] = Session(key, f"Chat session, {date}", ts, tuple(messages))
    return sorted(out.values(), key=lambda s: s.ts or 0.0)  # stable: same-time sessions keep file order


def _listed(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise IngestError(where, "expected a list")
    return value


# -- plain text --------------------------------------------------------------------------


def _text(text: str, name: str) -> Transcript:
    """One session of paragraphs; a paragraph's key is its place and its content's hash."""
    messages: list[Message] = []
    para: list[str] = []
    start = 0
    for number, line in enumerate([*text.splitlines(), ""], start=1):
        if line.strip():
            if not para:
                start = number
            para.append(line.rstrip())
        elif para:
            body = "\n".join(para)
            digest = hashlib.sha256(body.encode("utf-8")).hexdigest()[:12]
            messages.append(Message(f"{name}/p{len(messages) + 1}-{digest}", "", body, None, f"{name}:{start}"))
            para = []
    if not messages:
        raise IngestError(name, "holds no text")
    return Transcript(name, "text", (Session(name, f"Document {name}", None, tuple(messages)),))

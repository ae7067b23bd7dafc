"""Writing a transcript into a memory: each session a task, each message an event.

Every message is checked before anything is written, so a refused transcript
writes nothing. A session is written as one ``add_many`` (in chunks of
:data:`CHUNK` for a long one): its task, then its messages under it, each at its
original time (the weights count recency from it) with its speaker and its key in
meta (``source``: the transcript's name, ``source_id``: the key). Keys already in
the memory are not written again: ingesting the same file twice, or again after a
crash, writes only what is missing. A session's task is written as any task is, so
the last session ingested is the active node afterwards, as if the agent had lived
through it.

Where a session goes: at the top (``parent=None``), under a given node, or, with
``parent=AUTO``, under the task branch its text reads closest to
(``MemoryTree.place``), and at the top when no branch is close enough.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import _validate as check
from ..errors import IngestError, InvalidContentError
from ..items import Auto, Root
from ..model import Node, NodeType, Placement
from ..writing import ROOT
from .formats import Message, Session, Transcript

#: The meta keys of an ingested memory.
SOURCE = "source"
SOURCE_ID = "source_id"
SPEAKER = "speaker"
#: The importance of an assistant's message: below an event's default, so that what
#: the user said (which cannot be had again) outranks the replies (which can).
ASSISTANT_IMPORTANCE = 0.3
#: Memories written in one transaction, at most.
CHUNK = 256
#: Characters of a session's text its placement reads (``parent=AUTO``).
_PLACE_CHARS = 2000


@dataclass(frozen=True)
class IngestReport:
    """What ``ingest`` wrote, or would write (``dry_run``)."""

    name: str
    #: "messages", "sessions" or "text": how the file was read.
    format: str
    sessions: int
    messages: int
    #: New memories written now (sessions' tasks and messages; none on a dry run).
    written: int
    #: Sessions and messages already in the memory, not written again.
    skipped: int
    #: Messages without text, left out.
    empty: int
    dry_run: bool
    #: The sessions and their first messages as an indented tree, a line each.
    tree: str
    #: The node id of each session's task (empty on a dry run).
    session_ids: tuple[str, ...] = ()
    #: Messages (or sessions' tasks) merged into a near-twin already in the memory
    #: (``[dedup]``) instead of written as new memories.
    merged: int = 0


@dataclass(frozen=True)
class Target:
    """What ingesting needs of a memory handle."""

    add_many: Callable[[list[dict[str, Any]]], list[Node]]
    place: Callable[[str], Placement]
    #: Every node of the namespace, archived ones too.
    nodes: Callable[[], list[Node]]
    max_chars: int


def write(transcript: Transcript, target: Target, *, parent: Node | str | Root | Auto | None = None,
          dry_run: bool = False, progress: Callable[[int, int], None] | None = None) -> IngestReport:
    """Write ``transcript`` into ``target`` (see the module notes)."""
    check_all(transcript, target.max_chars)
    known = ingested(target.nodes(), transcript.name)
    total = sum(len(s.messages) for s in transcript.sessions)
    # (a session whose task was archived since, by forgetting, gets nothing more)
    todo = [(s, s.key in known, [] if s.key in known and not known[s.key].live else
             [m for m in s.messages if m.key not in known]) for s in transcript.sessions]
    skipped = sum(had + len(s.messages) - len(left) for s, had, left in todo)
    tree = render(transcript, known)
    if dry_run:
        return IngestReport(transcript.name, transcript.format, len(transcript.sessions), total, 0, skipped,
                            transcript.empty, True, tree)
    done = 0
    ids = []
    nodes: list[Node] = []
    for session, had, left in todo:
        head = known[session.key].id if had else None
        if head is None:
            where = _where(session, parent, target.place)
            task = target.add_many([_task(session, transcript.name, where)])
            nodes += task
            head = task[0].id
        for start in range(0, len(left), CHUNK):
            nodes += target.add_many([_message(m, transcript.name, head, session) for m in left[start:start + CHUNK]])
        ids.append(head)
        done += len(session.messages)
        if progress is not None:
            progress(done, total)
    merged = sum(n.merged for n in nodes)
    return IngestReport(transcript.name, transcript.format, len(transcript.sessions), total, len(nodes) - merged,
                        skipped, transcript.empty, False, tree, tuple(ids), merged)


def check_all(transcript: Transcript, max_chars: int) -> None:
    """Refuse the whole transcript, naming the place, if any memory of it could not be written."""
    for session in transcript.sessions:
        for where, content in [(session.key, session.title), *((m.where, m.content) for m in session.messages)]:
            try:
                check.content(content, max_chars)
            except InvalidContentError as exc:
                raise IngestError(where, str(exc)) from None


def ingested(nodes: Iterable[Node], name: str) -> dict[str, Node]:
    """The keys of ``name``'s sessions and messages already in the memory (live or
    archived): key -> node."""
    return {n.meta[SOURCE_ID]: n for n in nodes
            if n.meta.get(SOURCE) == name and isinstance(n.meta.get(SOURCE_ID), str)}


def _where(session: Session, parent: Node | str | Root | Auto | None, place: Callable[[str], Placement]
           ) -> Node | str | Root:
    if parent is None:
        return ROOT
    if isinstance(parent, Auto):
        text = "\n".join([session.title, *(m.content for m in session.messages)])[:_PLACE_CHARS]
        placed = place(text)
        return placed.parent_id if placed.by == "branch" and placed.parent_id is not None else ROOT
    return parent


def _task(session: Session, name: str, parent: Node | str | Root) -> dict[str, Any]:
    return {"content": session.title, "type": NodeType.TASK, "parent": parent, "ts": session.ts,
            "meta": {SOURCE: name, SOURCE_ID: session.key}}


def _message(m: Message, name: str, head: str, session: Session) -> dict[str, Any]:
    item: dict[str, Any] = {"content": m.content, "type": NodeType.EVENT, "parent": head,
                            "ts": m.ts if m.ts is not None else session.ts,
                            "meta": {SOURCE: name, SOURCE_ID: m.key, SPEAKER: m.speaker}}
    if m.speaker.lower() == "assistant":
        item["importance"] = ASSISTANT_IMPORTANCE
    return item


def render(transcript: Transcript, known: Mapping[str, Node], shown: int = 3) -> str:
    """The sessions as a tree: each task, its first ``shown`` messages, how many more;
    what is already in the memory marked."""
    lines = [f"{transcript.name}: {transcript.format}, {len(transcript.sessions)} sessions, "
             f"{sum(len(s.messages) for s in transcript.sessions)} messages"]
    for s in transcript.sessions:
        had = sum(m.key in known for m in s.messages)
        mark = f", {had} already in" if had else ""
        lines.append(f"[task] {_clip(s.title)}  ({len(s.messages)} messages{mark})"
                     + ("  (already in)" if s.key in known else ""))
        lines += [f"  [event] {_clip(m.content)}" for m in s.messages[:shown]]
        if len(s.messages) > shown:
            lines.append(f"  … {len(s.messages) - shown} more")
    return "\n".join(lines)


def _clip(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


"""Ingest: chat transcripts and documents into a memory, at their original times.

``MemoryTree.ingest(path)`` (and ``hybrid-memory ingest FILE``) reads a file
(:mod:`.formats`: OpenAI-style messages as JSON or JSON Lines, sessions with dates,
plain text) and writes each session as a task and each message as an event under it
(:mod:`.write`). Nothing of a file that cannot be read is written; what is already
in the memory is not written again.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import IngestError
from .formats import FORMATS, Message, Session, Transcript, read
from .write import ASSISTANT_IMPORTANCE, SOURCE, SOURCE_ID, SPEAKER, IngestReport, Target, write

__all__ = [
    "ASSISTANT_IMPORTANCE",
    "FORMATS",
    "SOURCE",
    "SOURCE_ID",
    "SPEAKER",
    "IngestReport",
    "Message",
    "Session",
    "Target",
    "Transcript",
    "load",
    "read",
    "write",
]


def load(source: str | os.PathLike[str] | None, *, text: str | None = None, name: str | None = None,
         format: str = "auto") -> Transcript:
    """The transcript of the file ``source``, or of ``text`` (named ``name``): exactly
    one of the two. Its name (what keys its memories) is the file's name."""
    if (source is None) == (text is None):
        raise IngestError(name or "ingest", "give a file or text, exactly one")
    if text is not None:
        if not isinstance(text, str):
            raise IngestError(name or "ingest", f"text must be a string, got {type(text).__name__}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise IngestError("ingest", "name must be a non-empty string")
        return read(text, name or "text", format)
    if not isinstance(source, (str, os.PathLike)):
        raise IngestError("ingest", f"source must be a path, got {type(source).__name__}")
    path = Path(source)
    if not path.is_file():
        raise IngestError(str(path), "no such file")
    try:
        content = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError(str(path), f"not UTF-8 text (byte {exc.start})") from None
    return read(content, name or path.name, format)

"""The export file's format and the node fields replay rebuilds."""

from __future__ import annotations

import re

from ..errors import (
    InvalidInputError,
)

FORMAT = "hybrid-memory"
VERSION = 1

#: The node fields replay rebuilds (every ``hm_nodes`` column but the namespace,
#: the embedding and its model name, which travel with the content).
STATE_FIELDS = (
    "id", "parent_id", "type", "content", "meta", "importance", "confidence",
    "access_count", "pinned", "status", "version", "depth", "path", "branch_id",
    "created_at", "updated_at", "accessed_at", "active_at", "archived_op",
    "content_hash", "tokens",
)
#: What a skeleton of a purged payload leaves out: everything that was said.
WORDS = frozenset({"content", "meta", "content_hash", "tokens", "note"})
ID_PATTERN = re.compile(r"^[0-9A-Za-z_]{1,32}$")
CHUNK = 500


class BadSnapshotError(InvalidInputError):
    """An export file that cannot be imported; ``line`` is its 1-based line number
    (``None`` when the problem is the file as a whole). Nothing was written."""

    code = "invalid_snapshot"

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line is not None else message)
        self.line = line

"""The exception tree of hybrid_memory.

Everything the library raises on purpose derives from one root, grouped by what
a caller does about it::

    HybridMemoryError                 root; catch this to catch everything
    ├── InvalidInputError             the call was wrong; nothing was changed
    │   ├── InvalidContentError       empty, oversized or non-text content
    │   ├── InvalidWeightError        NaN, non-numeric or outside [0, 1]
    │   ├── InvalidTypeError          an unknown node type or argument type
    │   ├── CycleError                a move into the node's own subtree
    │   └── IngestError               a transcript to ingest is malformed (names the line)
    ├── NotFoundError                 no such node (or it is not live)
    ├── NamespaceError                the node belongs to another tenant
    ├── ConflictError                 the node changed since the caller read it
    ├── ConfigError                   a configuration file or value is wrong
    │   └── EncryptionKeyError        a key is missing, malformed or the wrong one
    ├── AccessDeniedError             the handle's role does not allow the call
    ├── ClosedError                   the memory was closed
    └── StorageError                  the relational store or the index failed

Each class carries a stable ``code`` (for logs, a server's responses and the
command line) and the ``exit_code`` the CLI returns for it.
"""

from __future__ import annotations


class HybridMemoryError(Exception):
    """Root of every error hybrid_memory raises on purpose."""

    code = "hybrid_memory_error"
    exit_code = 1


class InvalidInputError(HybridMemoryError):
    """The arguments were wrong. The memory is unchanged."""

    code = "invalid_input"
    exit_code = 2


class InvalidContentError(InvalidInputError):
    code = "invalid_content"


class InvalidWeightError(InvalidInputError):
    code = "invalid_weight"


class InvalidTypeError(InvalidInputError):
    code = "invalid_type"


class CycleError(InvalidInputError):
    code = "cycle"


class IngestError(InvalidInputError):
    """A transcript given to ``ingest`` cannot be read: nothing of it was written.
    ``where`` names the file and, when it has one, the line (``"chat.jsonl:17"``)."""

    code = "invalid_transcript"

    def __init__(self, where: str, problem: str | None = None) -> None:
        # (one argument: the whole message, as every error of the tree takes it)
        super().__init__(where if problem is None else f"{where}: {problem}")
        self.where = "" if problem is None else where
        self.problem = where if problem is None else problem


class NotFoundError(HybridMemoryError):
    code = "not_found"
    exit_code = 3


class NamespaceError(HybridMemoryError):
    """A node of another namespace was named. Tenants are walls: never an empty result."""

    code = "namespace_mismatch"
    exit_code = 4


class ConflictError(HybridMemoryError):
    code = "conflict"
    exit_code = 5


class ConfigError(HybridMemoryError):
    code = "config"
    exit_code = 6


class EncryptionKeyError(ConfigError):
    """The memory is encrypted and no key, a malformed key or another key was given.
    Nothing was read or written."""

    code = "encryption_key"


class AccessDeniedError(HybridMemoryError):
    """The handle was opened with a role that does not allow this call."""

    code = "access_denied"
    exit_code = 9


class ClosedError(HybridMemoryError):
    code = "closed"
    exit_code = 7


class StorageError(HybridMemoryError):
    code = "storage"
    exit_code = 8


__all__ = [
    "AccessDeniedError",
    "ClosedError",
    "ConfigError",
    "ConflictError",
    "CycleError",
    "EncryptionKeyError",
    "HybridMemoryError",
    "IngestError",
    "InvalidContentError",
    "InvalidInputError",
    "InvalidTypeError",
    "InvalidWeightError",
    "NamespaceError",
    "NotFoundError",
    "StorageError",
]

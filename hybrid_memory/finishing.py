"""summarize() and finish(): the steps that write a summary of a node's subtree.

Read the node and its live subtree; have the summarizer make the text (outside any
transaction: it may be an LLM call); write the summary as a memory under the node;
then, in one transaction, mark the node (its meta's ``summary_id``, and
``finished_at`` for ``finish``) and archive the summary it had before. What the
summary is, and what it changes, is in :mod:`hybrid_memory.summaries`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Connection

from . import _validate as check
from . import summaries
from .config import Config
from .editing import Editor
from .errors import InvalidInputError
from .items import NodeRef, update_values
from .model import Node, NodeType, Status, tree_order
from .store.schema import node_from_row
from .store.sql import SqlStore
from .writing import Writer


class Finisher:
    """The summaries of one handle. ``add`` writes a memory (``MemoryTree.add``),
    ``weigh`` is a node's weight at a time, ``write_with`` runs a write transaction
    (with the handle's buffered reads), ``written`` notes index writes to apply."""

    def __init__(self, *, store: SqlStore, namespace: str, config: Config, writer: Writer, editor: Editor,
                 add: Callable[..., Node], weigh: Callable[[Node, float], float],
                 write_with: Callable[[Callable[[Connection], Any]], Any], written: Callable[[], None],
                 clock: Callable[[], float]) -> None:
        self.store, self.namespace, self.config = store, namespace, config
        self._writer, self._editor, self._add, self._weigh = writer, editor, add, weigh
        self._write_with, self._written, self._clock = write_with, written, clock

    def summarize(self, node: NodeRef, summarizer: summaries.Summarizer | None, budget_tokens: int | None,
                  *, finish: bool) -> Node:
        """Write the summary of ``node`` (and, with ``finish``, mark the task finished)."""
        budget = self.config.write.summary_tokens if budget_tokens is None else check.positive_int(
            budget_tokens, "budget_tokens")
        with self.store.reading() as conn:
            head = node_from_row(self._writer.row(conn, node, live=True))
            below = [node_from_row(r) for r in self.store.tree.subtree(conn, self.namespace, head.path,
                                                                       status=Status.LIVE)]
        if finish and head.type is not NodeType.TASK:
            raise InvalidInputError(f"finish takes a task; node {head.id} is a {head.type.value}")
        covered = summaries.details(tree_order(below), head.id)
        if not covered:
            raise InvalidInputError(f"nothing under node {head.id} to summarize")
        now = self._clock()
        content, name = summaries.write_text(summarizer, covered, [self._weigh(n, now) for n in covered], budget)
        written = self._add(check.content(content, self.config.write.max_content_chars), type=NodeType.SUMMARY,
                            parent=head.id, importance=max(n.importance for n in covered),
                            meta=summaries.summary_meta(head.id, covered, name), ts=now)

        def mark(conn: Connection) -> None:
            # The node as it is now, not as it was read: another handle may have written
            # its meta (or summarized it) while the summarizer ran, an LLM call perhaps.
            current = node_from_row(self._writer.row(conn, head.id, live=True))
            before = current.meta.get(summaries.SUMMARY_ID)
            values = update_values(None, None, None,
                                   summaries.marked(current.meta, written.id, now if finish else None), None,
                                   self.config)
            self._editor.update(conn, head.id, values, now=now, expected_version=None, vec=None, above=())
            old = self.store.nodes.get(conn, before) if isinstance(before, str) and before != written.id else None
            if old is not None and old.status == Status.LIVE.value and old.namespace == self.namespace:
                self._editor.archive(conn, old.id, now)

        self._write_with(mark)
        self._written()
        return written

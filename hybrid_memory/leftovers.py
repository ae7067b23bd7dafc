"""What a crash, or an embedder that failed, left undone in the stored memory, done at
open and by ``admin.repair()``: vectors not yet computed, vectors read with a path that has
changed since, long memories not yet cut into passages; and the problems an open
reports (:attr:`~hybrid_memory.model.RecoveryState.problems`).

Invariants: each step is idempotent and leaves the memory whole when the embedder
fails (the memory is found by its words meanwhile, and the problem is reported); a
vector stored here is read with the node's current path.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from . import context, passages
from .config import Config
from .embed import Embedder
from .embedding_worker import EmbeddingWorker
from .model import Node
from .recovery import corrupt_log_entries
from .store.schema import to_blob
from .store.sql import SqlStore
from .store.vectors import VectorIndex

log = logging.getLogger("hybrid_memory")


class Leftovers:
    """The unfinished work of one namespace, and what is still wrong with it.

    ``unembedded``, ``out_of_context`` and ``uncut`` hold the problem each step last
    reported ("" when it succeeded)."""

    def __init__(self, store: SqlStore, index: VectorIndex, embedder: Embedder, config: Config, namespace: str,
                 worker: EmbeddingWorker, paths: context.PathVectors) -> None:
        self.store, self.index, self.embedder, self.config = store, index, embedder, config
        self.namespace = namespace
        self._worker = worker
        self._paths = paths
        self.unembedded = ""
        self.out_of_context = ""
        self.uncut = ""

    def heal(self, *, waiting: bool = False) -> tuple[str, ...]:
        """Do each step, noting the problem each reports. With ``waiting``: returns the
        ids whose vectors waited to be read again in their path before (else ())."""
        self.unembedded = self.embed()  # memories a crash or a failed embedder left without vectors
        before = context.waiting(self.store, self.namespace) if waiting else ()
        self.out_of_context = self.read_in_context()  # vectors read with a path that changed
        self.uncut = self.cut_all()  # long memories without their passages
        return before

    def embed(self, *, strict: bool = False) -> str:
        """Embed the nodes that were committed before their vector and lost it (a crash
        between the two commits of a single add, or a power cut that took the second
        back), or whose path changed before their write (``Written.misread``): each is
        stored with its vector read in context, and its index write goes to the
        outbox. Returns the problem to report when the embedder fails ("" otherwise;
        ``strict``: raises it)."""
        with self.store.reading() as conn:
            left = self.store.nodes.unembedded(conn, self.store.outbox.embed_waiting(conn, self.namespace))
            rows = self.store.nodes.get_many(conn, sorted(left))
            above = context.ancestors(self.store, conn, [r.path for r in rows.values()])
        if not rows:
            return ""
        ids = list(rows)
        try:
            vectors = context.embed(self.embedder, [(rows[i].content, above[rows[i].path]) for i in ids], self._paths)
        except Exception as exc:  # the memories are there, found by their words: open anyway
            if strict:
                raise
            return f"{len(ids)} memories wait for their vectors (the embedder failed: {exc})"
        self._worker.embedded = True
        pairs = [(i, to_blob(v)) for i, v in zip(ids, vectors, strict=True)]
        self.store.write(lambda conn: self.store.nodes.settle_embeddings(conn, self.namespace, pairs))
        log.info("embedded %d memories committed before their vectors (namespace %r)", len(pairs), self.namespace)
        return ""

    def read_in_context(self) -> str:
        """Read again the vectors whose path changed before a crash (or since an earlier
        version made them). Returns the problem to report when the embedder fails."""
        try:
            context.refresh(self.store, self.embedder, self.namespace, self._paths)
        except Exception as exc:  # each keeps its earlier vector meanwhile
            return f"vectors wait to be read again with their changed path (the embedder failed: {exc})"
        return ""

    def refresh(self) -> int:
        """Read again, in their current path, the vectors marked as read in another.
        Returns how many were (their index writes wait in the outbox). A failure is
        not the caller's (its change is committed): the marked nodes keep their
        vectors, ``admin.verify()`` lists them, and the next open or repair reads them."""
        try:
            return context.refresh(self.store, self.embedder, self.namespace, self._paths)
        except Exception as exc:
            log.warning("vectors below a changed path wait to be read again (%s): reopen or repair", exc)
            return 0

    def cut_all(self) -> str:
        """Cut into passages the long memories that have none for their content (a
        crash after the write's commit, an import, a new key, a lowered
        ``write.passage_tokens``; a memory cut at another size keeps its passages).
        Returns the problem to report when the embedder fails ("" otherwise)."""
        size = self.config.write.passage_tokens
        with self.store.reading() as conn:
            left = passages.uncut(conn, self.namespace, size)
        if not left:
            return ""
        try:
            passages.fill(self.store, self.embedder, self.namespace, left, size)
        except Exception as exc:  # found as before meanwhile, and shown by their first passage
            return f"{len(left)} long memories wait for their passages (the embedder failed: {exc})"
        log.info("cut %d long memories into passages (namespace %r)", len(left), self.namespace)
        return ""

    def cut(self, written: Iterable[Node]) -> None:
        """Cut the long ones of ``written`` (just committed) into passages. A failure
        leaves them to the next open: each is found as before, and shown by its first
        passage meanwhile."""
        size = self.config.write.passage_tokens
        long = [n.id for n in written if passages.is_long(n.content, size)]
        if not long:
            return
        try:
            passages.fill(self.store, self.embedder, self.namespace, long, size)
        except Exception as exc:
            log.warning("passages of %d long memories left for the next open: %s", len(long), exc)

    def problems(self) -> tuple[str, ...]:
        """What is wrong and was not healed by the open's outbox drain."""
        problems = []
        with self.store.reading() as conn:
            pending = self.store.outbox.pending_count(conn, self.namespace, index_only=True)
            one = self.store.tree.any_live_id(conn, self.namespace)
            vectors = self.store.nodes.embeddings(conn, [] if one is None else [one])
            sample = list(vectors)  # (none while that node's vector is still being computed elsewhere)
        if pending:
            problems.append(f"the vector index is unreachable: {pending} index operations are pending")
        elif sample:
            # An embedded index whose folder is there is taken as whole (verify() compares
            # its contents): asking it would load chromadb, most of a command's start.
            lost = getattr(self.index, "folder_lost", lambda: None)()
            try:
                if lost or (lost is None and not self.index.query(self.namespace, vectors[sample[0]][None, :], 1)[0]):
                    problems.append("the vector index is empty (its folder was lost?): run admin.repair() or admin.reindex()")
            except Exception as exc:  # the index is derived: report, keep serving from the store
                problems.append(f"the vector index cannot be read ({exc}): run admin.reindex()")
        for left in (self.unembedded, self.out_of_context, self.uncut):
            if left:
                problems.append(f"{left}: reopen with a working embedder")
        bad = corrupt_log_entries(self.store, self.namespace, last_only=True)
        if bad:
            problems.append(f"operation-log entry #{bad[0]} is corrupt: run admin.repair()")
        for p in problems:
            log.warning("%s (namespace %r)", p, self.namespace)
        return tuple(problems)

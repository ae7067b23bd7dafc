"""Healing the derived vector index from the relational truth."""

from __future__ import annotations

import logging

import numpy as np

from .store.sql import SqlStore
from .store.vectors import VectorIndex

log = logging.getLogger("hybrid_memory")


def drain_outbox(store: SqlStore, index: VectorIndex, namespace: str) -> int:
    """Apply pending index work (idempotent upserts and deletes) and clear it.

    Returns how many outbox rows were applied. If the index fails, the rows stay
    and the next drain (every write, and every open) tries again: the relational
    store already holds the truth, so the caller's write is not failed for it.
    """
    with store.reading() as conn:
        rows = store.pending(conn, namespace)
        if not rows:
            return 0
        last: dict[str, str] = {}
        for r in rows:  # the last action on a node wins
            last.pop(r.node_id, None)
            last[r.node_id] = r.action
        wanted = [i for i, a in last.items() if a == "upsert"]
        live = store.get_many(conn, wanted, live_only=True)
        vectors = store.embeddings(conn, list(live))
    upserts = [i for i in wanted if i in vectors]
    deletes = [i for i in last if i not in vectors]
    try:
        if upserts:
            index.upsert(namespace, upserts, np.stack([vectors[i] for i in upserts]))
        if deletes:
            index.delete(namespace, deletes)
    except Exception as exc:  # any index failure: keep the outbox for the next drain
        log.warning("vector index update deferred (%d pending): %s", len(rows), exc)
        return 0
    seqs = [r.seq for r in rows]
    store.write(lambda conn: store.clear_outbox(conn, seqs))
    return len(rows)

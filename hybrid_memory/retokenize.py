"""Re-index a namespace's lexical terms when the tokenizer changed.

The lexical index holds the terms :func:`hybrid_memory.text.terms` made of each
memory when it was written. When the tokenizer changes (:data:`text.TERMS_VERSION`),
a query's terms would no longer match those stored, so opening a memory indexed
under another version re-indexes it: every node holding postings gets the terms of
its content under the current version, a few hundred nodes per transaction, and
the version is recorded last. An interrupted pass is finished by the next open (a
node re-indexed twice holds the same terms). Other handles may read while it runs;
until it ends they can miss a word of a memory not yet re-indexed.
"""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.engine import Connection

from . import text
from .store.schema import nodes, terms
from .store.sql import SqlStore

log = logging.getLogger("hybrid_memory")

_CHUNK = 500


def version_key(namespace: str) -> str:
    """The store setting that records the namespace's tokenizer version."""
    return f"terms_version:{namespace}"


def check_terms(store: SqlStore, namespace: str) -> int:
    """Re-index ``namespace``'s terms unless they were made by this tokenizer
    version; how many nodes were re-indexed."""
    key = version_key(namespace)
    with store.reading() as conn:
        if store.settings.get(conn, key) == text.TERMS_VERSION:
            return 0
    done, last = 0, ""

    def chunk(conn: Connection) -> list[str]:
        ids = list(conn.execute(
            select(terms.c.node_id).where(terms.c.namespace == namespace, terms.c.node_id > last)
            .group_by(terms.c.node_id).order_by(terms.c.node_id).limit(_CHUNK)).scalars())
        if ids:
            contents = {i: c for i, c in conn.execute(select(nodes.c.id, nodes.c.content).where(nodes.c.id.in_(ids)))}
            store.terms.unindex(conn, ids)
            store.terms.index_many(conn, namespace, [(i, text.term_counts(contents[i])) for i in ids if i in contents])
        return ids

    while True:
        ids = store.write(chunk)
        if not ids:
            break
        if not done:
            log.info("re-indexing the lexical terms of namespace %r (tokenizer version %s)", namespace,
                     text.TERMS_VERSION)
        done += len(ids)
        last = ids[-1]
    store.write(lambda conn: store.settings.set(conn, key, text.TERMS_VERSION))
    return done

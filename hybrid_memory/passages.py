"""Long memories, searched and shown by passage.

A memory longer than ``write.passage_tokens`` (a chat turn of 15,000 characters,
a document) is kept whole in its node, and cut into passages of at most that many
tokens, each ending at a sentence's end where one falls in the second half of its
window. Each passage gets a vector of its own: an embedder reads only the first
few hundred tokens of a text, so the node's own vector knows nothing of the rest.

Retrieval finds and ranks a long memory as any other (its own vector, all of its
words) and shows only the passage whose vector and words answer the query best,
so one long document costs a passage of the token budget, not all of it. (Scored
by its best passage, a memory of many passages had as many draws, and long
memories that did not answer outranked short ones that did: eval/CHANGES.md.)
The passages are derived data, like the vector index:
their rows hold offsets and vectors only, and are cut again whenever the content
they were cut from (its hash) is not the node's any more.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import and_, delete, exists, insert, select
from sqlalchemy.engine import Connection

from . import text
from .embed import Embedder
from .store.schema import from_blob, nodes, passages, to_blob
from .store.sql import SqlStore
from .weights import blend

log = logging.getLogger("hybrid_memory")

#: What ends a sentence: a passage is cut after one where it can.
_ENDS = frozenset(".!?;。！？；…")
_CHUNK = 500


class Passages(NamedTuple):
    """The passages of one long memory: (start, stop) offsets into its content, and
    one vector per passage, as rows."""

    spans: tuple[tuple[int, int], ...]
    vectors: np.ndarray[Any, Any]


def is_long(content: str, size: int) -> bool:
    """Whether ``content`` has more than ``size`` tokens: it is cut into passages."""
    return len(content) > size and text.count_tokens(content) > size  # (a token has a character at least)


def cut(content: str, size: int) -> list[tuple[int, int]]:
    """The (start, stop) spans of ``content``'s passages of at most ``size`` tokens
    (as :func:`text.count_tokens` counts), in order, covering every token. Empty
    when the whole has no more than ``size``: its own vector covers it."""
    pieces = text.token_spans(content)
    if sum(n for _, _, n in pieces) <= size:
        return []
    out: list[tuple[int, int]] = []
    i = 0
    while i < len(pieces):
        total, j, after_end = 0, i, -1
        while j < len(pieces) and (total + pieces[j][2] <= size or j == i):
            total += pieces[j][2]
            at_end = content[pieces[j][0]] in _ENDS or (
                j + 1 < len(pieces) and "\n" in content[pieces[j][1]:pieces[j + 1][0]])
            if at_end and 2 * total >= size:
                after_end = j
            j += 1
        if j < len(pieces) and after_end >= 0:
            j = after_end + 1
        out.append((pieces[i][0], pieces[j - 1][1]))
        i = j
    return out


def render(content: str, span: tuple[int, int] | None) -> str:
    """The text of ``span`` of ``content``, marked with "…" where it was cut (the
    whole content for None)."""
    if span is None:
        return content
    start, stop = span
    return ("…" if start > 0 else "") + content[start:stop] + ("…" if stop < len(content) else "")


def choose(content: str, held: Passages, qvec: np.ndarray[Any, Any], idf: Mapping[str, float],
           dense_mix: float) -> tuple[int, float]:
    """The passage of ``held`` that best answers the query (its index and its dense
    score): its cosine and the share of the query's informative words (``idf``:
    each query term's weight) it holds, blended as a node's are."""
    dense = held.vectors @ qvec
    total = sum(idf.values())
    best, best_score = 0, -1.0
    for n, (start, stop) in enumerate(held.spans):
        lexical = 0.0
        if total > 0:
            words = set(text.terms(content[start:stop]))
            lexical = sum(w for t, w in idf.items() if t in words) / total
        score = blend(float(dense[n]), lexical, dense_mix)
        if score > best_score:
            best, best_score = n, score
    return best, float(dense[best])


def read(conn: Connection, rows: Mapping[str, Any]) -> dict[str, Passages]:
    """The passages of those ``rows`` (node rows by id) that have them and were cut
    from the content the row holds now."""
    out: dict[str, Passages] = {}
    ids = list(rows)
    for i in range(0, len(ids), _CHUNK):
        got: dict[str, list[Any]] = {}
        q = select(passages.c.node_id, passages.c.start, passages.c.stop, passages.c.content_hash,
                   passages.c.embedding).where(passages.c.node_id.in_(ids[i:i + _CHUNK])).order_by(
            passages.c.node_id, passages.c.seq)
        for r in conn.execute(q):
            if r.content_hash == rows[r.node_id].content_hash:
                got.setdefault(r.node_id, []).append(r)
        for node_id, held in got.items():
            out[node_id] = Passages(tuple((r.start, r.stop) for r in held),
                                    np.stack([from_blob(r.embedding) for r in held]))
    return out


def uncut(conn: Connection, namespace: str, size: int) -> list[str]:
    """Ids of the live memories of ``namespace`` longer than ``size`` tokens whose
    passages are missing or were cut from another content."""
    current = exists().where(and_(passages.c.node_id == nodes.c.id, passages.c.seq == 0,
                                  passages.c.content_hash == nodes.c.content_hash))
    q = select(nodes.c.id).where(nodes.c.namespace == namespace, nodes.c.status == "live",
                                 nodes.c.tokens > size, ~current).order_by(nodes.c.id)
    return list(conn.execute(q).scalars())


def fill(store: SqlStore, embedder: Embedder, namespace: str, ids: Iterable[str], size: int,
         progress: Callable[[int, int], None] | None = None) -> int:
    """Cut the memories ``ids`` into passages and store each passage's vector,
    replacing what they had; a memory whose content changed meanwhile (or that is
    gone) is left for the next fill. Returns the memories cut."""
    wanted = list(dict.fromkeys(ids))
    done = 0
    for i in range(0, len(wanted), 64):
        with store.reading() as conn:
            rows = store.nodes.get_many(conn, wanted[i:i + 64], live_only=True)
        work = [(row.id, row.content_hash, spans, row.content) for row in rows.values()
                if (spans := cut(row.content, size))]
        if work:
            texts = [content[a:b] for _, _, spans, content in work for a, b in spans]
            vectors = iter(embedder.embed(texts))
            cut_rows = [(node_id, h, [(a, b, to_blob(next(vectors))) for a, b in spans])
                        for node_id, h, spans, _ in work]
            done += store.write(functools.partial(_store, namespace=namespace, cut_rows=cut_rows), synced=False)
        if progress is not None:
            progress(min(i + 64, len(wanted)), len(wanted))
    return done


def _store(conn: Connection, *, namespace: str,
           cut_rows: Sequence[tuple[str, str, Sequence[tuple[int, int, bytes]]]]) -> int:
    """Replace the passages of each (node id, content hash, passages) whose node
    still holds that content."""
    hashes = {r.id: r.content_hash for r in conn.execute(select(nodes.c.id, nodes.c.content_hash).where(
        nodes.c.id.in_([r[0] for r in cut_rows])))}
    keep = [r for r in cut_rows if hashes.get(r[0]) == r[1]]
    if not keep:
        return 0
    conn.execute(delete(passages).where(passages.c.node_id.in_([r[0] for r in keep])))
    conn.execute(insert(passages), [
        dict(node_id=node_id, seq=n, namespace=namespace, start=a, stop=b, content_hash=h, embedding=blob)
        for node_id, h, spans in keep for n, (a, b, blob) in enumerate(spans)])
    return len(keep)


def drop(conn: Connection, ids: Sequence[str]) -> None:
    """Delete the passages of ``ids`` (their content changed or they are gone)."""
    for i in range(0, len(ids), _CHUNK):
        conn.execute(delete(passages).where(passages.c.node_id.in_(ids[i:i + _CHUNK])))


__all__ = ["Passages", "choose", "cut", "drop", "fill", "is_long", "read", "render", "uncut"]

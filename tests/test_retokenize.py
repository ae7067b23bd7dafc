"""A memory whose lexical terms were made by another tokenizer version is
re-indexed when opened (hybrid_memory.retokenize), in English and Chinese, on a
real SQLite file with Chroma and the model."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from hybrid_memory import ROOT, retokenize, text
from hybrid_memory.store.schema import terms

MEMORIES = {
    "en": ("Support ticket for the upload failure", ["Reproduced the upload failure on Android 14",
                                                     "The customer switched to the yearly plan"]),
    "zh": ("出差报销", ["曹华的杭州之行订了西湖边的酒店", "报销单还在财务审核"]),
}
# The question holds the first memory's words only in another form (en) or as a
# word the version-1 bigrams never held apart from their neighbours (zh).
QUERY = {"en": "Who is reproducing uploads?", "zh": "杭州的酒店订在哪里"}


def version_one(content: str) -> Counter[str]:
    """What the first tokenizer stored: whole lower-case words, CJK as bigrams only."""
    out: list[str] = []
    for piece in re.findall(r"[\u4e00-\u9fff]+|[^\W_]+", content.lower()):
        if re.fullmatch(r"[\u4e00-\u9fff]+", piece):
            out += [piece[i:i + 2] for i in range(len(piece) - 1)] or [piece]
        elif piece not in {"the", "on", "to", "for"}:
            out.append(piece)
    return Counter(out)


def postings(mem: Any, ids: list[str]) -> dict[str, dict[str, int]]:
    with mem.store.reading() as conn:
        rows = conn.execute(select(terms.c.node_id, terms.c.term, terms.c.tf).where(terms.c.node_id.in_(ids))).all()
    out: dict[str, dict[str, int]] = {i: {} for i in ids}
    for node_id, term, tf in rows:
        out[node_id][term] = tf
    return out


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_old_index_is_rebuilt_on_open_and_then_found(open_memory: Any, clock: Any, tmp_path: Path,
                                                        lang: str) -> None:
    folder = tmp_path / f"old{lang}"
    mem = open_memory(namespace="t", folder=folder)
    title, contents = MEMORIES[lang]
    task = mem.add(title, type="task", parent=ROOT)
    ids = [task.id, *(mem.add(c, type="event", parent=task).id for c in contents)]
    written = dict(zip(ids, [title, *contents], strict=True))
    current = postings(mem, ids)
    assert current == {i: dict(text.term_counts(c)) for i, c in written.items()}

    def as_version_one(conn: Any) -> None:
        mem.store.terms.unindex(conn, ids)
        mem.store.terms.index_many(conn, "t", [(i, version_one(c)) for i, c in written.items()])
        mem.store.settings.set(conn, retokenize.version_key("t"), "1")

    mem.store.write(as_version_one)
    assert postings(mem, ids) != current
    mem.close()

    again = open_memory(namespace="t", folder=folder)
    assert postings(again, ids) == current
    with again.store.reading() as conn:
        assert again.store.settings.get(conn, retokenize.version_key("t")) == text.TERMS_VERSION
    assert again.admin.verify().clean
    recall = again.retrieve(QUERY[lang], k=2, reinforce=False)
    assert ids[1] in recall.ids
    # Opened again: nothing left to do; forced again: the same postings (an interrupted
    # pass finishes the same way).
    assert retokenize.check_terms(again.store, "t") == 0
    again.store.write(lambda conn: again.store.settings.set(conn, retokenize.version_key("t"), "1"))
    assert retokenize.check_terms(again.store, "t") == 3
    assert postings(again, ids) == current


def test_a_new_memory_records_the_version_and_other_namespaces_keep_theirs(open_memory: Any, clock: Any,
                                                                          tmp_path: Path) -> None:
    folder = tmp_path / "two"
    a = open_memory(namespace="a", folder=folder)
    a.add("Reproduced the upload failure", type="event")
    b = open_memory(namespace="b", folder=folder)
    node = b.add("报销单还在财务审核", type="event")
    with a.store.reading() as conn:
        assert a.store.settings.get(conn, retokenize.version_key("a")) == text.TERMS_VERSION
        assert a.store.settings.get(conn, retokenize.version_key("b")) == text.TERMS_VERSION
    # Re-indexing one namespace touches no other's postings.
    before = postings(b, [node.id])
    a.store.write(lambda conn: a.store.settings.set(conn, retokenize.version_key("a"), "1"))
    assert retokenize.check_terms(a.store, "a") == 1
    assert postings(b, [node.id]) == before

"""The lexical index kept in memory (``accel.in_memory_lexicon``).

A :class:`Lexicon` answers stage 1's questions of the lexical index (document
frequencies, which nodes hold the rarer words, the postings of given nodes, tie
keys) from arrays instead of SQLite rows. These tests hold its answers against the
store's after every kind of write, by this handle and by another one, in English
and Chinese; check that it catches up node by node (and folds its overlay) instead
of reading the whole index again, that an erasure makes it read everything again,
and that retrieval answers the same with it and without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from hybrid_memory import ROOT, MemoryTree, text
from hybrid_memory.accel import lexicon as lexicon_module
from hybrid_memory.accel.lexicon import Lexicon
from hybrid_memory.store.schema import nodes, terms
from hybrid_memory.testing import Faults

ABSENT = ["nonexistentword", "不存在的词"]


def _agrees(mem: MemoryTree, *lexicons: Lexicon | _Both) -> set[str]:
    """Sync each of ``lexicons`` and check each of its answers equals the store's;
    returns the namespace's stored terms."""
    words: set[str] = set()
    for each in lexicons:
        for lex in each.lexicons if isinstance(each, _Both) else (each,):
            words = _agrees_one(mem, lex)
    return words


def _agrees_one(mem: MemoryTree, lex: Lexicon) -> set[str]:
    store, ns = mem.store, mem.namespace
    with store.reading() as conn:
        lex.sync(conn)
        words = sorted(set(conn.execute(select(terms.c.term).where(terms.c.namespace == ns)).scalars()))
        every = list(conn.execute(select(nodes.c.id).where(nodes.c.namespace == ns)).scalars())
        held = list(conn.execute(select(terms.c.node_id).where(terms.c.namespace == ns).distinct()).scalars())
        query = words + ABSENT
        assert lex.term_df(conn, ns, query) == store.terms.term_df(conn, ns, query)
        groups = [[w] for w in words[:40]] + [words[40:80]] + [ABSENT]
        assert lex.term_masks(conn, ns, groups) == store.terms.term_masks(conn, ns, groups)
        assert sorted(lex.postings(conn, ns, query, every)) == sorted(store.terms.postings(conn, ns, query, every))
        assert lex.tie_keys(conn, held) == store.terms.tie_keys(conn, held)
    return set(words)


class _Both:
    """Two lexicons checked as one."""

    def __init__(self, *lexicons: Lexicon) -> None:
        self.lexicons = lexicons

    @property
    def loads(self) -> tuple[int, ...]:
        return tuple(x.loads for x in self.lexicons)

    @property
    def caught_up(self) -> tuple[int, ...]:
        return tuple(x.caught_up for x in self.lexicons)


@pytest.fixture
def sqlite_only(stores: Any) -> None:
    if not stores.is_sqlite:
        pytest.skip("the change table is kept on SQLite stores only")


def test_the_copy_answers_as_the_store_after_every_kind_of_write(open_memory: Any, tmp_path: Path,
                                                                   sqlite_only: None) -> None:
    mem = open_memory(dedup={"enabled": False})
    other = open_memory(session="other", dedup={"enabled": False})  # another writer on the same store
    lex = Lexicon(mem.store, mem.namespace)
    assert _agrees(mem, lex) == set()  # an empty memory
    task = mem.add("Support ticket TKT-7 printer offline on floor 3", type="task", parent=ROOT)
    with mem.store.reading() as conn:
        first = mem.store.log.last_seq(conn, mem.namespace)
    one = mem.add("Reinstalled the printer driver", type="event", parent=task)
    assert "printer" in _agrees(mem, lex)
    mem.add_many([{"content": f"Printer note {i}: toner and paper checked", "type": "event", "parent": task.id}
                  for i in range(6)])
    zh = mem.add("报销单：出租车发票已上传", type="task", parent=ROOT)
    zh_note = other.add("财务要求补充酒店发票", type="event", parent=zh)
    assert {"toner", "酒店"} <= _agrees(mem, lex)
    # a second copy read now holds these memories in its arrays, the first in its overlay
    late = Lexicon(mem.store, mem.namespace)
    lex = _Both(lex, late)
    mem.update(one, content="Replaced the fuser unit")
    assert "fuser" in _agrees(mem, lex)
    other.add("The drum needs a warm-up of 5 minutes", type="fact", parent=task)  # numbered after the arrays
    assert "warm" in _agrees(mem, lex)
    other.archive(zh_note)
    assert "酒店" not in _agrees(mem, lex)
    mem.unarchive(zh_note)
    assert "酒店" in _agrees(mem, lex)
    mem.delete(one)
    assert "fuser" not in _agrees(mem, lex)
    assert lex.loads == (1, 1) and min(lex.caught_up) > 0  # node by node, the index read once each
    mem.admin.erase(zh)
    assert not any("发票" in t for t in _agrees(mem, lex))
    mem.forget(max_nodes=4)
    _agrees(mem, lex)
    mem.rewind(seq=first)  # a time travel back to the ticket alone
    assert "toner" not in _agrees(mem, lex)
    snapshot = tmp_path / "snap.jsonl"
    mem.admin.export(snapshot)
    copy = open_memory(namespace="copy", folder=tmp_path / "copy")
    copy_lex = Lexicon(copy.store, copy.namespace)
    _agrees(copy, copy_lex)
    copy.admin.import_(snapshot)
    assert "printer" in _agrees(copy, copy_lex)


def test_an_erased_namespace_is_read_again_and_others_stay(open_memory: Any, tmp_path: Path,
                                                           sqlite_only: None) -> None:
    mem = open_memory()
    mem.add("Travel booking: train to Lyon on Friday", type="task", parent=ROOT)
    lex = Lexicon(mem.store, mem.namespace)
    assert "lyon" in _agrees(mem, lex)
    neighbour = open_memory(namespace="n2")
    neighbour.add("Travel booking: flight to Oslo", type="task", parent=ROOT)
    assert "oslo" not in _agrees(mem, lex)  # another namespace's writes are not this one's
    assert lex.loads == 1
    mem.admin.erase_namespace()
    assert _agrees(mem, lex) == set()
    assert lex.loads == 2
    mem.add("Travel booking: 去杭州的高铁", type="task", parent=ROOT)
    assert "杭州" in _agrees(mem, lex)
    assert lex.loads == 2


def test_the_overlay_folds_into_the_arrays(open_memory: Any, monkeypatch: pytest.MonkeyPatch,
                                           sqlite_only: None) -> None:
    """With every catch-up folded, and with none, the answers are the store's."""
    mem = open_memory(dedup={"enabled": False})
    task = mem.add("Code change CHG-12: retry uploads on timeout", type="task", parent=ROOT)
    for fold in (True, False):
        monkeypatch.setattr(lexicon_module, "_FOLD_MIN", 0 if fold else 10**9)
        monkeypatch.setattr(lexicon_module, "_FOLD_SHARE", 0.0 if fold else 1.0)
        lex = Lexicon(mem.store, mem.namespace)
        _agrees(mem, lex)
        added = mem.add_many([{"content": f"Upload retry {i} ({'重试上传' if i % 2 else 'backoff'})",
                               "type": "event", "parent": task.id} for i in range(5)])
        _agrees(mem, lex)
        mem.update(added[0], content="Upload retry now waits two seconds")
        mem.archive(added[1])
        assert "backoff" in _agrees(mem, lex)
        mem.unarchive(added[1])
        _agrees(mem, lex)
        assert lex.loads == 1


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_retrieval_answers_the_same_with_the_copy(open_memory: Any, tmp_path: Path, lang: str) -> None:
    """A handle keeping the copy (from its second query) and one reading the store
    answer every query alike, while both handles write between the queries."""
    folder = tmp_path / "mem"
    # (no active-task prior: the two handles are two sessions, each with its own focus)
    kept_faults, plain_faults = Faults(), Faults()
    kept = open_memory(folder=folder, faults=kept_faults, dedup={"enabled": False}, retrieval={"active_prior": 0.0})
    plain = open_memory(folder=folder, session="plain", faults=plain_faults, dedup={"enabled": False},
                        accel={"in_memory_lexicon": False}, retrieval={"active_prior": 0.0})
    kept_retriever, plain_retriever = kept_faults.retriever, plain_faults.retriever
    assert kept_retriever is not None and plain_retriever is not None
    if lang == "zh":
        tasks = ["报销单 EXP-31：上海出差的酒店发票", "工单 TKT-90：打印机无法连接", "代码变更：上传超时重试"]
        notes = ["酒店发票金额是八百元", "打印机驱动已经重装", "重试间隔改为两秒", "财务要求补充出租车发票"]
        queries = ["酒店发票金额是多少？", "打印机的问题解决了吗？", "上传重试的间隔是多少？", "财务要求补充什么？"]
    else:
        tasks = ["Expense claim EXP-31: hotel invoice for the Shanghai trip", "Ticket TKT-90: printer will not connect",
                 "Code change: retry uploads on timeout"]
        notes = ["The hotel invoice totals 800 yuan", "The printer driver was reinstalled",
                 "Retries now wait two seconds", "Finance asked for the taxi receipt too"]
        queries = ["How much is the hotel invoice?", "Was the printer fixed?", "How long do upload retries wait?",
                   "What did finance ask for?"]
    heads = [kept.add(t, type="task", parent=ROOT) for t in tasks]

    def answer(mem: MemoryTree, q: str) -> list[tuple[str, str, float]]:
        return [(s.node.content, s.reason, round(s.score, 9)) for s in mem.retrieve(q, reinforce=False).nodes]

    for i, note in enumerate(notes):
        writer = kept if i % 2 else plain
        writer.add(note, type="fact", parent=heads[i % len(heads)])
        for q in queries:
            assert answer(kept, q) == answer(plain, q)
        assert kept_retriever.wait_for_lexicon() == kept.store.is_sqlite  # built on a thread of its own
    lexicon = kept_retriever.lexicon
    if kept.store.is_sqlite:
        assert lexicon is not None and lexicon.loads == 1 and lexicon.caught_up >= len(notes) - 1
        assert lexicon.position > 0
    else:  # PostgreSQL keeps no change table: the store answers
        assert lexicon is None
    assert plain_retriever.lexicon is None


def test_one_query_reads_no_copy(open_memory: Any, sqlite_only: None) -> None:
    """A process that asks once (the command line) does not read the whole index."""
    faults = Faults()
    mem = open_memory(faults=faults)
    retriever = faults.retriever
    assert retriever is not None
    mem.add("Support ticket: the VPN drops every hour", type="task", parent=ROOT)
    mem.retrieve("Why does the VPN drop?")
    assert retriever.lexicon is None
    mem.retrieve("Why does the VPN drop?")
    assert retriever.wait_for_lexicon()


def test_a_copy_of_a_postgresql_store_is_refused(open_memory: Any, stores: Any) -> None:
    if stores.is_sqlite:
        pytest.skip("PostgreSQL only")
    mem = open_memory()
    with pytest.raises(ValueError, match="SQLite"):
        Lexicon(mem.store, mem.namespace)


@pytest.mark.parametrize("word", ["deadline", "截止"], ids=["en", "zh"])
def test_a_tie_at_the_edge_names_only_the_newest_and_answers_as_the_store(open_memory: Any, sqlite_only: None,
                                                                         word: str) -> None:
    """A query word that many memories hold alike gives them all one share: the top n
    cuts that tie newest first. From its second query on, the copy names only the
    tied memories that can be among the newest (their creation times kept with their
    tie keys), and the cut is the store's, ties in time included; a changed memory's
    time is read again."""
    from hybrid_memory.retrieval.query import QueryWords

    mem = open_memory(dedup={"enabled": False})
    term = text.terms(word)[0]  # (the stem of "deadline")
    task = mem.add(f"Project {word} tracking", type="task", parent=ROOT)
    made = []
    for i in range(60):
        # Creation times with repeats: pairs of memories share a second.
        made.append(mem.add(f"{word} item {i} of the plan", type="fact", parent=task.id, ts=1_000_000.0 + i // 2))
    lex = Lexicon(mem.store, mem.namespace)

    def top(index: Any) -> list[tuple[str, float]]:
        with mem.store.reading() as conn:
            if isinstance(index, Lexicon):
                index.sync(conn)
            words = QueryWords(mem.store, conn, mem.namespace, [term], 0, None, index)
            return words.top(7, lambda ids: index.tie_keys(conn, ids))

    expected = top(mem.store.terms)
    assert len(expected) == 7 and len({share for _, share in expected}) <= 2
    assert top(lex) == expected  # (reads the tie keys of every tied memory)
    with mem.store.reading() as conn:
        lex.sync(conn)
        marks = lex.term_mask_arrays(conn, mem.namespace, [[term]])
    assert marks is not None
    tied = marks.nodes
    newest = marks.newest(tied, 7)
    assert newest is not None and 7 <= len(newest) < len(tied)
    assert set(marks.ids_of(newest)) >= {i for i, _ in expected if i != task.id}
    assert top(lex) == expected  # now through the newest alone
    # A changed memory's tie key is read again: the copy answers as the store does.
    mem.update(made[-1].id, content=f"{word} item 59, moved", ts=1_000_100.0)
    with mem.store.reading() as conn:
        lex.sync(conn)
        again = lex.term_mask_arrays(conn, mem.namespace, [[term]])
    assert again is not None and again.newest(again.nodes, 7) is None  # (one time not known yet)
    assert top(lex) == top(mem.store.terms)  # (and reads it)
    assert again.newest(again.nodes, 7) is not None
    assert top(lex) == top(mem.store.terms)
    assert marks.newest(tied, len(tied)) is None and marks.newest(tied, 0) is None

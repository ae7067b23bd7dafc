"""accel.common_postings: a query word held by many memories is counted, not
listed; it still weighs in every score it is part of, but cannot make a memory a
lexical candidate on its own. With the limit off, retrieval is what it always was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hybrid_memory import ROOT, MemoryTree
from hybrid_memory.retrieval import Retriever
from hybrid_memory.retrieval.query import QueryWords
from hybrid_memory.testing import Faults
from hybrid_memory.text import terms

# "ticket" / "工单" is in every memory of the first task; the other words are rare.
TICKETS = [
    ("Support ticket: printer offline on floor 3", "task"),
    ("Ticket note: the printer driver was reinstalled", "event"),
    ("Ticket note: toner cartridge replaced", "event"),
    ("Ticket note: customer prefers email updates", "preference"),
    ("Ticket note: reproduced the paper jam in the lab", "event"),
]
ORDERS = [
    ("工单：报销差旅费用", "task"),
    ("工单备注：出租车发票已上传", "event"),
    ("工单备注：财务要求补充酒店发票", "event"),
    ("工单备注：审批人是张经理", "fact"),
]


def _retriever(faults: Faults) -> Retriever:
    """The retriever of the memory opened with ``faults``."""
    retriever = faults.retriever
    assert retriever is not None
    return retriever


def _agree(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    """Two sorted answers of (content, score, ...) name the same memories with the same
    other fields; scores agree within 1e-6 (a query vector's last float bits vary
    between calls, seen on PostgreSQL)."""
    return ([(x[0], *x[2:]) for x in a] == [(y[0], *y[2:]) for y in b]
            and all(abs(x[1] - y[1]) <= 1e-6 for x, y in zip(a, b, strict=True)))


def _fill(mem: MemoryTree) -> None:
    for rows in (TICKETS, ORDERS):
        task = mem.add(rows[0][0], type=rows[0][1], parent=ROOT)
        for content, kind in rows[1:]:
            mem.add(content, type=kind, parent=task)


def _words(mem: MemoryTree, query: str, common: int) -> QueryWords:
    with mem.store.reading() as conn:
        w = QueryWords(mem.store, conn, mem.namespace, list(dict.fromkeys(terms(query))), common)
        before = dict(w.lexical)
        w.complete(n.id for n in mem.nodes())
    w.before = before  # type: ignore[attr-defined]
    return w


@pytest.mark.parametrize("query", ["Which ticket note says the paper jam was reproduced?", "哪条工单备注提到酒店发票？"])
def test_a_common_word_is_counted_not_listed(open_memory: Any, query: str) -> None:
    mem = open_memory()
    _fill(mem)
    full = _words(mem, query, 0)
    capped = _words(mem, query, 3)
    common = [t for t in full.known if full.df[t] > 3]
    assert common, "the query holds a word of more than three memories"
    # The same document frequencies and weights, so the same shares once completed.
    assert capped.df == full.df and capped.idf == full.idf
    assert capped.lexical == pytest.approx(full.lexical)
    # Before completion only memories holding a rare word of the query had a share:
    # one holding nothing but the common word is no candidate.
    rare = {i for t, i, _ in full.postings if full.df[t] <= 3}
    assert set(capped.before) == rare
    assert set(full.before) > rare


def test_with_the_limit_above_every_word_retrieval_is_unchanged(open_memory: Any, tmp_path: Any) -> None:
    answers = []
    for common in (0, 2, 1000):
        mem = open_memory(folder=tmp_path / f"m{common}", accel={"common_postings": common})
        _fill(mem)
        recall = mem.retrieve("Which ticket note says the paper jam was reproduced?", reinforce=False)
        # (sorted: the memories share one clock time, so tree order among siblings is by random id)
        answers.append(sorted((s.node.content, s.score, s.reason) for s in recall.nodes))
        assert "Ticket note: reproduced the paper jam in the lab" in [s.node.content for s in recall.nodes]
    assert _agree(answers[0], answers[2]), (answers[0], answers[2])


def test_a_negative_limit_is_refused(open_memory: Any) -> None:
    from hybrid_memory.errors import ConfigError

    with pytest.raises(ConfigError, match="common_postings"):
        open_memory(accel={"common_postings": -1})


def test_a_handle_scores_as_a_fresh_one_after_the_live_set_changes(open_memory: Any, tmp_path: Any) -> None:
    """The idf's document count is kept between queries until the log moves on:
    after adds, an archive and a delete, the same handle answers as a new one."""
    folder = tmp_path / "m"
    faults = Faults()
    mem = open_memory(folder=folder, faults=faults)
    retriever = _retriever(faults)
    _fill(mem)
    query = "哪条工单备注提到酒店发票？"

    def answer(m: MemoryTree) -> list[tuple[str, float]]:
        return sorted((s.node.content, s.score) for s in m.retrieve(query, reinforce=False).nodes)

    first = answer(mem)
    with mem.store.reading() as conn:
        assert retriever.live_count(conn) == mem.admin.stats().live == len(TICKETS) + len(ORDERS)
    notes = [n for n in mem.nodes() if n.content.startswith("工单备注")]
    for change in (lambda: mem.archive(notes[0]), lambda: mem.delete(notes[1]),
                   lambda: mem.add("工单备注：酒店发票已补交", type="event", parent=notes[2].parent_id)):
        change()
        with mem.store.reading() as conn:
            assert retriever.live_count(conn) == mem.admin.stats().live
        mine = answer(mem)
        other = open_memory(folder=folder)
        assert _agree(mine, answer(other))
        other.close()
    assert not _agree(mine, first)


def test_the_kept_count_follows_adds_off_the_log(open_memory: Any, tmp_path: Any) -> None:
    """An agent's loop (write, ask): after adds one by one and in batches, twins that
    merge, a focus, feedback and a pin between the questions, the handle's kept count
    is the live count, read again only when some other operation was logged, and the
    handle answers as a new one."""
    folder = tmp_path / "m"
    faults = Faults()
    mem = open_memory(folder=folder, faults=faults)
    retriever = _retriever(faults)
    _fill(mem)
    query = "哪条工单备注提到酒店发票？"
    mem.retrieve(query, reinforce=False)
    notes = [n for n in mem.nodes() if n.content.startswith("工单备注")]
    task = notes[0].parent_id
    counted = []
    real = mem.store.tree.live_count

    def counting(conn: Any, namespace: str) -> int:
        counted.append(namespace)
        return real(conn, namespace)

    mem.store.tree.live_count = counting  # type: ignore[method-assign]
    for i, change in enumerate((
        lambda: mem.add("工单备注：酒店发票需要盖章", type="event", parent=task),
        lambda: mem.add_many([{"content": f"Ticket note {i}: hotel invoice stamped", "type": "event", "parent": task}
                              for i in range(3)]),
        lambda: mem.add("工单备注：酒店发票需要盖章", type="event", parent=task),  # a twin: merged
        lambda: mem.focus(notes[0]),
        lambda: mem.feedback(notes[-1], importance=0.9),
        lambda: mem.pin(notes[-1]),
        lambda: mem.archive(notes[0]),  # not an add: counted again
    )):
        change()
        with mem.store.reading() as conn:
            assert retriever.live_count(conn) == real(conn, mem.namespace)
        mine = sorted((s.node.content, s.score) for s in mem.retrieve(query, reinforce=False).nodes)
        other = open_memory(folder=folder)
        answer = sorted((s.node.content, s.score) for s in other.retrieve(query, reinforce=False).nodes)
        other.close()
        assert _agree(mine, answer), i
    if mem.store.is_sqlite:  # the adds moved the count off the log; the merge and the archive read it
        assert len(counted) == 2
    else:  # PostgreSQL numbers entries out of commit order: every move of the log is counted
        assert len(counted) == 7


def test_a_tie_across_the_cut_goes_to_the_newer_memory_in_any_store_order() -> None:
    """Lexical candidates: memories holding the same query words tie, often by the
    hundreds. The cut takes exactly n, the newer first, then by content hash, however
    the store listed them (ranking arithmetic only: the order is given)."""
    import itertools

    from hybrid_memory.retrieval.query import top_scores

    scores = {"a": 0.9, "b": 0.5, "c": 0.5, "d": 0.5, "e": 0.1}
    keys = {"a": (0.0, "x"), "b": (1.0, "h2"), "c": (3.0, "h1"), "d": (3.0, "h0"), "e": (9.0, "z")}
    asked: list[list[str]] = []

    def order(ids: Any) -> dict[str, tuple[float, str]]:
        asked.append(sorted(ids))
        return {i: keys[i] for i in ids}

    for listing in itertools.permutations(scores):
        assert top_scores({k: scores[k] for k in listing}, 3, order) == [("a", 0.9), ("d", 0.5), ("c", 0.5)]
    assert all(a == ["b", "c", "d"] for a in asked)  # only the tied block is looked up
    assert top_scores(scores, 1, lambda ids: pytest.fail("no tie across the cut: nothing to look up")) == [("a", 0.9)]
    whole = top_scores(scores, 4, lambda ids: pytest.fail("the whole tie fits: nothing to look up"))
    assert sorted(whole) == [("a", 0.9), ("b", 0.5), ("c", 0.5), ("d", 0.5)]


def test_a_handle_spreads_as_a_fresh_one_once_the_memory_grows_past_a_few_branches(
        open_memory: Any, tmp_path: Path) -> None:
    """Whether the memory has more branches than spread_branches (a small memory opens
    every close branch) is kept between queries until the log moves: a handle that
    answered while the memory was small answers as a new handle once it is not."""
    folder = tmp_path / "m"
    faults = Faults()
    mem = open_memory(folder=folder, faults=faults, retrieval={"spread_branches": 2})
    retriever = _retriever(faults)
    _fill(mem)  # two branches: small
    query = "Which ticket note says the paper jam was reproduced?"

    def answer(m: MemoryTree) -> list[tuple[str, float, str]]:
        return sorted((s.node.content, s.score, s.reason) for s in m.retrieve(query, reinforce=False).nodes)

    answer(mem)
    seq_before = retriever.kept_branches
    assert seq_before is not None and seq_before[2] is False  # asked, and kept: small
    for name in ("Printer fleet audit: paper jam log", "Lab bench booking: reproduced a paper jam"):
        task = mem.add(name, type="task", parent=ROOT)
        mem.add(f"{name.split(':')[0]} note: the ticket about the paper jam", type="event", parent=task)
    mine = answer(mem)
    other = open_memory(folder=folder, retrieval={"spread_branches": 2})
    assert _agree(mine, answer(other))
    with mem.store.reading() as conn:
        assert mem.store.tree.has_more_branches(conn, mem.namespace, 2)
        assert retriever.has_more_branches(conn, 2)
    kept = retriever.kept_branches
    assert kept is not None and kept[0] != seq_before[0]

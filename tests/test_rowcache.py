"""The node rows kept in memory between queries (``accel.row_cache``).

A :class:`RowCache` serves the rows retrieval read before; a trigger notes every
UPDATE and DELETE of a node row, and a query drops the rows changed since the
last one first. These tests hold retrieval's answers with the cache to those
without it while two handles write between the queries (English and Chinese),
check that a change made by any code (raw SQL included) reaches the next query,
that a transaction older than the cache reads the store, that the cache keeps at
most its capacity, and that a node handed to a caller shares nothing with it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hybrid_memory import ROOT, Config, MemoryTree
from hybrid_memory.accel.rowcache import RowCache
from hybrid_memory.errors import ConfigError
from hybrid_memory.testing import Faults


@pytest.fixture
def sqlite_only(stores: Any) -> None:
    if not stores.is_sqlite:
        pytest.skip("the change table is kept on SQLite stores only")


TEXTS = {
    "en": {
        "tasks": ["Expense claim EXP-31: hotel invoice for the Shanghai trip", "Ticket TKT-90: printer will not connect"],
        "notes": ["The hotel invoice totals 800 yuan", "The printer driver was reinstalled",
                  "Finance asked for the taxi receipt too", "The printer needs a new fuser"],
        "queries": ["How much is the hotel invoice?", "Was the printer fixed?", "What did finance ask for?"],
        "changed": "The hotel invoice totals 950 yuan after the minibar",
    },
    "zh": {
        "tasks": ["报销单 EXP-31：上海出差的酒店发票", "工单 TKT-90：打印机无法连接"],
        "notes": ["酒店发票金额是八百元", "打印机驱动已经重装", "财务要求补充出租车发票", "打印机需要换新的定影器"],
        "queries": ["酒店发票金额是多少？", "打印机的问题解决了吗？", "财务要求补充什么？"],
        "changed": "酒店发票金额改为九百五十元，含迷你吧",
    },
}


def _rows(faults: Faults) -> RowCache | None:
    """The row cache of the handle opened with ``faults``."""
    assert faults.retriever is not None
    return faults.retriever.rows


def _answer(mem: MemoryTree, q: str) -> list[tuple[str, str, str, float, float]]:
    recall = mem.retrieve(q, reinforce=False)
    return [(s.node.id, s.node.content, s.reason, round(s.score, 12), round(s.weight, 12)) for s in recall.nodes]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_retrieval_answers_the_same_with_the_cache(open_memory: Any, tmp_path: Path, lang: str) -> None:
    """A handle keeping rows and one reading the store answer every query alike,
    while both write between the queries: adds, an update, a read counted, an
    archive, a restore and a delete."""
    t = TEXTS[lang]
    folder = tmp_path / "mem"
    # (no active-task prior: the two handles are two sessions, each with its own focus)
    kept_faults, plain_faults = Faults(), Faults()
    kept = open_memory(folder=folder, faults=kept_faults, dedup={"enabled": False}, usage={"flush_every": 1},
                       retrieval={"active_prior": 0.0})
    plain = open_memory(folder=folder, session="plain", faults=plain_faults, dedup={"enabled": False},
                        accel={"row_cache": 0}, retrieval={"active_prior": 0.0}, usage={"flush_every": 1})
    heads = [kept.add(x, type="task", parent=ROOT) for x in t["tasks"]]
    notes = []
    for i, note in enumerate(t["notes"]):
        notes.append((kept if i % 2 else plain).add(note, type="fact", parent=heads[i % 2]))
        for q in t["queries"]:
            assert _answer(kept, q) == _answer(plain, q)

    def writes() -> list[Any]:
        return [
            lambda: plain.update(notes[0], content=t["changed"], importance=0.9),
            lambda: plain.retrieve(t["queries"][0]),  # a read counted (written at once: flush_every 1)
            lambda: plain.archive(notes[1]),
            lambda: kept.unarchive(notes[1]),
            lambda: plain.delete(notes[3]),
        ]

    for write in writes():
        write()
        for q in t["queries"]:
            assert _answer(kept, q) == _answer(plain, q)
    cache = _rows(kept_faults)
    if kept.store.is_sqlite:
        assert cache is not None and cache.hits > 0 and cache.position > 0
        assert notes[3].id not in cache._rows  # deleted: dropped
        held = cache._rows.get(notes[0].id)
        assert held is None or held[0].content == t["changed"]
        assert t["changed"] in {c for _, c, *_ in _answer(kept, t["queries"][0])}
    else:  # PostgreSQL keeps no change table: the store answers
        assert cache is None
    assert _rows(plain_faults) is None


def test_a_change_by_any_code_reaches_the_next_query(open_memory: Any, sqlite_only: None) -> None:
    """The triggers note an UPDATE and a DELETE run outside the library (raw SQL
    in another connection): the next query drops those rows."""
    faults = Faults()
    mem = open_memory(dedup={"enabled": False}, faults=faults)
    task = mem.add("Ticket TKT-90: printer will not connect", type="task", parent=ROOT)
    note = mem.add("The printer driver was reinstalled", type="fact", parent=task)
    other = mem.add("The printer cable was replaced", type="fact", parent=task)
    mem.retrieve("Was the printer driver reinstalled?", reinforce=False)
    cache = _rows(faults)
    assert cache is not None and note.id in cache._rows and other.id in cache._rows
    before = cache.position
    db = mem.store.file
    assert db is not None
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE hm_nodes SET importance = 0.99 WHERE id = ?", (note.id,))
        raw.execute("DELETE FROM hm_terms WHERE node_id = ?", (other.id,))
        raw.execute("DELETE FROM hm_nodes WHERE id = ?", (other.id,))
    raw.close()
    recall = mem.retrieve("Was the printer driver reinstalled?", reinforce=False)
    assert cache.position > before
    assert cache._rows[note.id][0].importance == 0.99
    assert other.id not in {s.node.id for s in recall.nodes} and other.id not in cache._rows
    assert next(s for s in recall.nodes if s.node.id == note.id).node.importance == 0.99


def test_a_transaction_older_than_the_cache_reads_the_store(open_memory: Any, sqlite_only: None) -> None:
    mem = open_memory(dedup={"enabled": False})
    task = mem.add("出差 TRV-88 去里斯本", type="task", parent=ROOT)
    note = mem.add("TRV-88 的酒店是里斯本的 Avenida Palace。", type="fact", parent=task)
    cache = RowCache(mem.store, mem.namespace, 10)
    with mem.store.reading() as old:
        first = cache.view(old)
        assert first.rows([note.id])[note.id].content.startswith("TRV-88 的酒店")
        mem.update(note, content="TRV-88 改住 Hotel Britania。")
        with mem.store.reading() as new:
            assert cache.view(new).rows([note.id])[note.id].content == "TRV-88 改住 Hotel Britania。"
        # The old snapshot still reads its own row, from the store, and keeps nothing.
        stale = cache.view(old)
        assert stale.rows([note.id])[note.id].content.startswith("TRV-88 的酒店")
        # A view made before the cache moved on no longer shares it either.
        assert first.rows([note.id])[note.id].content.startswith("TRV-88 的酒店")
    assert cache._rows[note.id][0].content == "TRV-88 改住 Hotel Britania。"


def test_the_cache_keeps_at_most_its_capacity_and_only_live_rows_when_asked(open_memory: Any,
                                                                             sqlite_only: None) -> None:
    mem = open_memory(dedup={"enabled": False})
    task = mem.add("Ticket TKT-90: printer will not connect", type="task", parent=ROOT)
    notes = [mem.add(f"Printer note {i}: toner checked", type="event", parent=task) for i in range(5)]
    mem.archive(notes[0])
    cache = RowCache(mem.store, mem.namespace, 3)
    with mem.store.reading() as conn:
        view = cache.view(conn)
        assert set(view.rows([n.id for n in notes])) == {n.id for n in notes}  # archived too
        assert len(cache) == 3 and list(cache._rows) == [n.id for n in notes[2:]]  # the least recently used went
        assert set(view.rows([n.id for n in notes], live_only=True)) == {n.id for n in notes[1:]}
        assert [r.id for r in view.branch_rows([task.id])] == [r.id for r in
                                                               mem.store.tree.branch_rows(conn, mem.namespace, [task.id])]
    assert cache.hits > 0 and cache.misses >= 5


def test_a_node_handed_out_shares_nothing_with_the_cache(open_memory: Any, sqlite_only: None) -> None:
    mem = open_memory(dedup={"enabled": False})
    task = mem.add("Ticket TKT-90: printer will not connect", type="task", parent=ROOT)
    mem.add("The printer driver was reinstalled", type="fact", parent=task, meta={"by": "ops"})
    first = mem.retrieve("Was the printer driver reinstalled?", reinforce=False)
    fact = next(s.node for s in first.nodes if s.node.meta)
    fact.meta["by"] = "someone else"  # type: ignore[index]
    again = mem.retrieve("Was the printer driver reinstalled?", reinforce=False)
    assert next(s.node for s in again.nodes if s.node.id == fact.id).meta == {"by": "ops"}


def test_the_setting_is_checked_and_postgresql_keeps_no_cache(stores: Any, open_memory: Any) -> None:
    with pytest.raises(ConfigError, match="row_cache"):
        Config.load(overrides={"accel": {"row_cache": -1}})
    faults = Faults()
    mem = open_memory(faults=faults)
    if stores.is_sqlite:
        assert isinstance(_rows(faults), RowCache)
        with pytest.raises(ValueError, match="at least one"):
            RowCache(mem.store, mem.namespace, 0)
    else:
        assert _rows(faults) is None
        with pytest.raises(ValueError, match="SQLite"):
            RowCache(mem.store, mem.namespace, 10)


def test_an_erasure_leaves_nothing_in_the_cache(open_memory: Any, sqlite_only: None) -> None:
    faults = Faults()
    mem = open_memory(dedup={"enabled": False}, faults=faults)
    task = mem.add("报销单 EXP-31：上海出差的酒店发票", type="task", parent=ROOT)
    mem.add("酒店发票金额是八百元", type="fact", parent=task)
    mem.retrieve("酒店发票金额是多少？", reinforce=False)
    cache = _rows(faults)
    assert cache is not None and len(cache) > 0
    mem.admin.erase(task, compact=False)
    assert len(cache) == 0
    assert mem.retrieve("酒店发票金额是多少？", reinforce=False).nodes == ()


def test_the_tree_changes_shape_on_adds_deletes_and_moves_only(open_memory: Any, sqlite_only: None) -> None:
    """A new node, a deletion, an archive or a move is counted as a change of the
    tree's shape (which nodes each branch holds); a new content, a read counted or a
    vector settling is not, though each moves the rows' position."""
    mem = open_memory(dedup={"enabled": False}, usage={"flush_every": 1})

    def where() -> tuple[int, int]:
        with mem.store.reading() as conn:
            return mem.store.changes.rows_position(conn, mem.namespace)

    start = where()
    task = mem.add("出差 TRV-88 去里斯本", type="task", parent=ROOT)
    other = mem.add("Ticket TKT-90: printer will not connect", type="task", parent=ROOT)
    note = mem.add("TRV-88 的酒店是里斯本的 Avenida Palace。", type="fact", parent=task)
    added = where()
    assert added[1] > start[1]
    mem.update(note, content="TRV-88 改住 Hotel Britania。", importance=0.8)
    mem.retrieve("TRV-88 住哪家酒店？")  # a read, written at once
    touched = where()
    assert touched[1] == added[1] and touched[0] > added[0]
    steps = [lambda: mem.archive(note), lambda: mem.unarchive(note), lambda: mem.move(note, other),
             lambda: mem.delete(note)]
    for step in steps:
        before = where()
        step()
        assert where()[1] > before[1]


def test_an_erased_namespace_leaves_one_mark_and_every_cache_drops_its_rows(open_memory: Any, tmp_path: Path,
                                                                            sqlite_only: None) -> None:
    """The ids the triggers noted for an erased namespace give way to one row
    without a node id; another handle's cache then drops every row it kept."""
    folder = tmp_path / "mem"
    mem = open_memory(folder=folder, dedup={"enabled": False})
    faults = Faults()
    other = open_memory(folder=folder, session="other", dedup={"enabled": False}, faults=faults)
    task = mem.add("报销单 EXP-31：上海出差的酒店发票", type="task", parent=ROOT)
    mem.add("酒店发票金额是八百元", type="fact", parent=task)
    mem.add("Finance asked for the taxi receipt too", type="fact", parent=task)
    assert other.retrieve("酒店发票金额是多少？", reinforce=False).nodes
    cache = _rows(faults)
    assert cache is not None and len(cache) > 0
    mem.admin.erase_namespace(compact=False)
    with mem.store.reading() as conn:
        marks = conn.exec_driver_sql("SELECT node_id FROM hm_rows_changed WHERE namespace = ?",
                                     (mem.namespace,)).scalars().all()
    assert marks == [""]
    assert other.retrieve("酒店发票金额是多少？", reinforce=False).nodes == ()
    assert len(cache) == 0 and cache.resets == 1

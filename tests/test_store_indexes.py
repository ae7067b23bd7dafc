"""The indexes that keep the whole-namespace reads off the rows.

A forget pass reads a dozen small columns of every live node; the rows also hold
the content and the embedding (about 4 KB each), so on SQLite the pass reads
``hm_nodes_forget`` alone, and the live count stays on the narrow
``hm_nodes_branch``. A store made before an index existed gets it when opened.
Real model; SQLite plans are pinned, PostgreSQL plans by its statistics."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy.dialects import sqlite as sqlite_dialect

from hybrid_memory import ROOT
from hybrid_memory.store.sql import _Q, FORGET_COLUMNS, live_select, nodes


def _plan(mem: Any, statement: Any) -> str:
    compiled = statement.compile(dialect=sqlite_dialect.dialect())
    params = [compiled.params[name] for name in compiled.positiontup or ()]
    with mem.store.reading() as conn:
        rows = conn.connection.driver_connection.execute(f"EXPLAIN QUERY PLAN {compiled.string}", params).fetchall()
    return " ".join(str(row[-1]) for row in rows)


def test_the_forget_index_holds_every_column_a_pass_reads() -> None:
    (index,) = [i for i in nodes.indexes if i.name == "hm_nodes_forget"]
    held = [c.name for c in index.columns]
    assert held[:2] == ["namespace", "status"]
    assert {c.name for c in FORGET_COLUMNS} <= set(held)


def test_on_sqlite_a_forget_pass_and_the_live_count_read_indexes_alone(open_memory: Any, backend: str) -> None:
    if backend != "sqlite":
        return  # (PostgreSQL plans by its statistics: nothing to pin there)
    mem = open_memory()
    task = mem.add("Trip TRV-7 to Lisbon", type="task", parent=ROOT)
    mem.add("住在里斯本的酒店，含早餐", type="fact", parent=task)
    assert "COVERING INDEX hm_nodes_forget" in _plan(mem, live_select(mem.namespace, FORGET_COLUMNS))
    with mem.store.reading() as conn:
        plan = conn.connection.driver_connection.execute(f"EXPLAIN QUERY PLAN {_Q.live_count_sqlite}",
                                                         (mem.namespace,)).fetchall()
    assert "COVERING INDEX hm_nodes_branch" in " ".join(str(row[-1]) for row in plan)
    with mem.store.reading() as conn:
        assert mem.store.live_count(conn, mem.namespace) == 2
        read = mem.store.live_columns(conn, mem.namespace, FORGET_COLUMNS)
        assert sorted(r[0] for r in read) == sorted(mem.store.live_ids(conn, mem.namespace))
        assert task.id in {r[0] for r in read}


def test_a_store_made_without_the_forget_index_gets_it_when_opened(open_memory: Any, tmp_path: Path,
                                                                   backend: str) -> None:
    if backend != "sqlite":
        return  # (the same code path creates it on PostgreSQL; dropping it there needs the schema's name)
    folder = tmp_path / "old"
    mem = open_memory(folder=folder)
    mem.add("Ticket TKT-3: the VPN drops every hour", type="task", parent=ROOT)
    mem.close()
    with sqlite3.connect(folder / "memory.db") as db:
        db.execute("DROP INDEX hm_nodes_forget")
    again = open_memory(folder=folder)
    with sqlite3.connect(folder / "memory.db") as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "hm_nodes_forget" in names
    assert again.forget(threshold=0.0, dry_run=True).details == ()

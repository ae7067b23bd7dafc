"""The index that keeps a forget pass off the rows.

A forget pass reads a dozen small columns of every live node; the rows also hold
the content and the embedding (about 4 KB each), so on SQLite the pass reads
``hm_nodes_forget`` alone. That index leads with an expression no other statement
names, so SQLite's planner (which has no statistics) never takes it for another
read: it once took it for the dedup read of every write and scanned the whole
namespace there. A store made before the index existed gets it when opened.
Real model; SQLite plans are pinned, PostgreSQL plans by its statistics."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy.dialects import sqlite as sqlite_dialect

from hybrid_memory import ROOT
from hybrid_memory.store.nodes import Statements
from hybrid_memory.store.schema import FORGET_COLUMNS, FORGET_INDEX, sqlite_live_sql


def _plan(mem: Any, sql: str, params: Any) -> str:
    with mem.store.reading() as conn:
        rows = conn.connection.driver_connection.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
    return " ".join(str(row[-1]) for row in rows)


def test_the_forget_index_holds_every_column_a_pass_reads() -> None:
    held = {c.name for c in FORGET_INDEX.columns}
    assert {c.name for c in FORGET_COLUMNS} | {"namespace", "status"} <= held


def test_on_sqlite_only_a_forget_pass_reads_the_forget_index(open_memory: Any, backend: str) -> None:
    if backend != "sqlite":
        return  # (PostgreSQL plans by its statistics, and reads the path in that pass: no such index)
    mem = open_memory()
    task = mem.add("Trip TRV-7 to Lisbon", type="task", parent=ROOT)
    fact = mem.add("住在里斯本的酒店，含早餐", type="fact", parent=task)
    assert "COVERING INDEX hm_nodes_forget" in _plan(mem, sqlite_live_sql(FORGET_COLUMNS), (mem.namespace,))
    with mem.store.reading() as conn:
        read = mem.store.tree.live_columns(conn, mem.namespace, FORGET_COLUMNS)
        assert sorted(r[0] for r in read) == sorted([task.id, fact.id])
        assert {r[0]: r[1] for r in read} == {task.id: None, fact.id: task.id}
    # The dedup read of a write, which once took this index: the branch's index, by seeks.
    compiled = Statements.branch_vectors.compile(dialect=sqlite_dialect.dialect())
    values = {"ns": mem.namespace, "branch": task.id, "type": "fact", "limit": 65}
    params = [values.get(name, compiled.params.get(name)) for name in compiled.positiontup or ()]
    plan = _plan(mem, compiled.string, params)
    assert "hm_nodes_forget" not in plan and "hm_nodes_group" in plan, plan


def test_a_store_made_without_the_forget_index_gets_it_when_opened(open_memory: Any, tmp_path: Path,
                                                                   backend: str) -> None:
    if backend != "sqlite":
        return
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

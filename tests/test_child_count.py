"""``store.tree.child_count``: what every write checks against ``write.max_children``.
It counts the direct children of a parent (the root too), in any status, up to a
limit, and on SQLite it reads the (namespace, parent_id) index alone: selecting the
id instead made SQLite look up every child's row, 10 ms per write under a root of
5,000 tasks. Real model, SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from hybrid_memory import ROOT


def test_it_counts_direct_children_of_the_root_and_of_a_node_in_any_status(open_memory: Any) -> None:
    mem = open_memory()
    roots = [mem.add(f"Trip TRV-{i} to Lisbon", type="task", parent=ROOT) for i in range(4)]
    kids = [mem.add(f"Booked hotel night {i} for TRV-0", type="event", parent=roots[0].id) for i in range(3)]
    mem.add("Hotel breakfast is included for TRV-0", type="fact", parent=kids[0].id)  # a grandchild: not counted
    mem.archive(kids[1].id)
    with mem.store.reading() as conn:
        assert mem.store.tree.child_count(conn, mem.namespace, None, 100) == 4
        assert mem.store.tree.child_count(conn, mem.namespace, roots[0].id, 100) == 3  # the archived one too
        assert mem.store.tree.child_count(conn, mem.namespace, roots[1].id, 100) == 0
        assert mem.store.tree.child_count(conn, mem.namespace, None, 2) == 2  # counted up to the limit
        assert mem.store.tree.child_count(conn, "another", None, 100) == 0


def test_on_sqlite_the_count_reads_the_parent_index_alone(open_memory: Any, backend: str) -> None:
    if backend != "sqlite":
        return  # (PostgreSQL plans by its statistics: nothing to pin there)
    mem = open_memory()
    node = mem.add("Ticket TKT-1 for Northwind", type="task", parent=ROOT)
    from sqlalchemy import event

    seen: list[tuple[str, Any]] = []

    def note(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        seen.append((statement, parameters))

    with mem.store.reading() as conn:
        for parent in (None, node.id):
            seen.clear()
            event.listen(conn, "before_cursor_execute", note)
            try:
                mem.store.tree.child_count(conn, mem.namespace, parent, 10)
            finally:
                event.remove(conn, "before_cursor_execute", note)
            (statement, parameters), = seen
            plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters).fetchall()
            text = " ".join(str(row[-1]) for row in plan)
            assert "COVERING INDEX hm_nodes_parent" in text, text

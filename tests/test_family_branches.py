"""``store.tree.branches_under``: the branches of a top-level task's family, which
retrieval opens with a located branch (``retrieval.family_open``). Real model,
SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from hybrid_memory import ROOT


def test_it_lists_the_live_branches_under_a_root_and_nothing_else(open_memory: Any) -> None:
    mem = open_memory()
    ticket = mem.add("Support ticket TKT-4410: Initech reports the CSV export failing", type="task", parent=ROOT)
    mem.add("Initech is on the Business plan", type="fact", parent=ticket.id)
    repro = mem.add("Reproduce the export failure from TKT-4410", type="task", parent=ticket.id)
    mem.add("Reproduced TKT-4410 on Safari; it fails at 10,000 rows", type="event", parent=repro.id)
    deeper = mem.add("Bisect the failing release for TKT-4410", type="task", parent=repro.id)
    gone = mem.add("Draft the customer update for TKT-4410", type="task", parent=ticket.id)
    mem.archive(gone.id)
    other = mem.add("Expense claim EXP-2291: taxi receipts from Berlin", type="task", parent=ROOT)
    mem.add("The claim waits for Maria's approval", type="state", parent=other.id)
    with mem.store.reading() as conn:
        family = mem.store.tree.branches_under(conn, mem.namespace, ticket.id)
        assert family == sorted({ticket.id, repro.id, deeper.id})  # not the archived one, not EXP-2291's
        assert mem.store.tree.branches_under(conn, mem.namespace, other.id) == [other.id]
        assert mem.store.tree.branches_under(conn, "another", ticket.id) == []

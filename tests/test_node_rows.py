"""``node_from_row``: the Node of a stored row, made by filling the instance's fields
in one step rather than through the frozen dataclass's ``__init__`` (retrieval makes
about a hundred a query). The result must be the very Node the constructor gives:
every field equal, of the same types, immutable, and a bad stored value refused as
before. Real model, SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from hybrid_memory import ROOT
from hybrid_memory.model import Node, NodeType, Status
from hybrid_memory.store.schema import node_from_row, nodes


def _by_constructor(m: Any, merged: bool = False) -> Node:
    import json

    fields = {f.name: m[f.name] for f in dataclasses.fields(Node) if f.name not in ("merged", "placement")}
    fields.update(type=NodeType(m["type"]), status=Status(m["status"]), pinned=bool(m["pinned"]),
                  meta=json.loads(m["meta"]))
    return Node(**fields, merged=merged)


def test_a_row_becomes_the_node_the_constructor_makes(open_memory: Any) -> None:
    mem = open_memory()
    task = mem.add("出差 TRV-88 去里斯本", type="task", parent=ROOT, meta={"owner": "王伟"})
    fact = mem.add("The hotel for TRV-88 is the Avenida Palace", type="fact", parent=task.id, importance=0.9,
                   pinned=True)
    pref = mem.add("Prefers aisle seats", type="preference", parent=task.id)
    mem.archive(pref.id)
    with mem.store.reading() as conn:
        rows = conn.execute(nodes.select().where(nodes.c.namespace == mem.namespace)).all()
    assert len(rows) == 3
    for row in rows:
        for merged in (False, True):
            made, expected = node_from_row(row, merged), _by_constructor(row._mapping, merged)
            assert made == expected and repr(made) == repr(expected)
            assert type(made.type) is NodeType and type(made.status) is Status and type(made.pinned) is bool
            assert hash(made.id) == hash(expected.id) and made.merged is merged
            with pytest.raises(dataclasses.FrozenInstanceError):
                made.importance = 0.1  # type: ignore[misc]
        assert node_from_row(row._mapping) == node_from_row(row)  # a mapping as well as a Row
    by_id = {r.id: node_from_row(r) for r in rows}
    assert by_id[task.id].meta == {"owner": "王伟"} and by_id[fact.id].pinned and by_id[fact.id].importance == 0.9
    assert by_id[pref.id].status is Status.ARCHIVED and by_id[pref.id].type is NodeType.PREFERENCE
    assert mem.get(fact.id) == by_id[fact.id]


def test_an_unknown_stored_type_or_status_is_refused_as_the_enum_refuses_it(open_memory: Any) -> None:
    mem = open_memory()
    mem.add("Ticket TKT-9 for Contoso", type="task", parent=ROOT)
    with mem.store.reading() as conn:
        row = dict(conn.execute(nodes.select().where(nodes.c.namespace == mem.namespace)).one()._mapping)
    for column, value in (("type", "rumour"), ("status", "lost")):
        with pytest.raises(ValueError, match=value):
            node_from_row({**row, column: value})


def test_the_driver_reads_give_what_sqlalchemy_reads(open_memory: Any) -> None:
    """Retrieval's hot reads go through SQLite's own cursor where no column is sealed
    (store.nodes.node_rows and friends): the same rows, values and order as the
    SQLAlchemy statements they stand for (on PostgreSQL both are the statements)."""
    from hybrid_memory.store import log, outbox, schema, tree

    mem = open_memory(write={"index_batch": 64})  # (index writes wait in the outbox)
    trip = mem.add("出差 TRV-88 去里斯本", type="task", parent=ROOT)
    hotel = mem.add("The hotel for TRV-88 is the Avenida Palace", type="fact", parent=trip.id, importance=0.9)
    visa = mem.add("Apply for the visa for TRV-88", type="task", parent=trip.id)
    mem.add("签证还缺银行流水", type="state", parent=visa.id, pinned=True)
    gone = mem.add("Prefers aisle seats", type="preference", parent=trip.id)
    mem.archive(gone.id)
    other = mem.add("Refund INV-7 for Contoso", type="task", parent=ROOT)
    ids = [n.id for n in (trip, hotel, visa, gone, other)] + ["no-such-node"]
    store, ns = mem.store, mem.namespace
    with store.reading() as conn:
        every = conn.execute(nodes.select().where(nodes.c.namespace == ns)).all()
        assert len(every) == 6
        for live_only in (False, True):
            for embedding in (False, True):
                plain = store.nodes.node_rows(conn, ids, live_only=live_only, embedding=embedding)
                alchemy = store.nodes.get_many(conn, ids, live_only=live_only, embedding=embedding)
                assert plain.keys() == alchemy.keys() and (gone.id in plain) is not live_only
                for i, row in plain.items():
                    assert node_from_row(row) == node_from_row(alchemy[i])
                    assert row._mapping == dict(alchemy[i]._mapping)
                    if embedding:
                        assert row.embedding == alchemy[i].embedding and len(row.embedding) > 0
                    if store.is_sqlite:
                        assert type(row) is (schema.NodeRowEmbedded if embedding else schema.NodeRow)
        heads = [trip.id, visa.id, other.id]
        plain_rows = store.tree.branch_rows(conn, ns, heads)
        alchemy_rows = conn.execute(tree.Statements.branch_rows, {"ns": ns, "branches": heads}).all()
        assert [r.id for r in plain_rows] == [r.id for r in alchemy_rows] and len(plain_rows) == 5
        assert [node_from_row(r) for r in plain_rows] == [node_from_row(r) for r in alchemy_rows]
        assert [r.embedding for r in plain_rows] == [r.embedding for r in alchemy_rows]
        lo, hi = schema.subtree_range(f"{trip.id}/")
        assert store.tree.branches_under(conn, ns, trip.id) == [
            r[0] for r in conn.execute(tree.Statements.branches_under, {"ns": ns, "lo": lo, "hi": hi})] == sorted([trip.id, visa.id])
        assert store.log.last_seq(conn, ns) == conn.execute(log.Statements.last_seq, {"ns": ns}).scalar() > 0
        assert store.log.last_seq(conn, "no-such-namespace") == 0
        waiting = store.outbox.pending_upserts(conn, ns)
        assert waiting == [r[0] for r in conn.execute(outbox.Statements.pending_upserts, {"ns": ns, "limit": 4096})]
        assert {trip.id, hotel.id, visa.id, other.id} <= set(waiting)  # (index writes wait for 64)

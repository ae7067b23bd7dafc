"""Crash consistency between the relational store and the vector index: fault
points between the commit and the index write, verify/repair/reindex, a lost index
folder, a corrupt log entry, several writer processes, and stale index views."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from hybrid_memory import ROOT, ChromaIndex, Config, ConflictError, MemoryTree
from hybrid_memory.store.schema import oplog
from hybrid_memory.testing import Faults


class Crash(Exception):
    """Stands for the process dying at a fault point."""


def crash_at(point: str):  # type: ignore[no-untyped-def]
    def hook(at: str) -> None:
        if at == point:
            raise Crash(at)

    return hook


def live_ids(mem: MemoryTree) -> set[str]:
    return {n.id for n in mem.nodes()}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "mem"


def reopen(open_memory: Any, folder: Path) -> MemoryTree:
    return open_memory(folder=folder)


@pytest.mark.parametrize("point", ["before_index", "after_index"])
def test_a_crash_around_the_index_write_is_healed_at_the_next_open(open_memory, folder, point):
    faults = Faults()
    mem = open_memory(folder=folder, faults=faults, write={"index_batch": 1})  # the index write follows every commit
    task = mem.add("Expense claim for Zhang San", type="task")
    faults.hook = crash_at(point)
    with pytest.raises(Crash):
        mem.add("Finance returned the claim: the invoice is unreadable", type="event", parent=task)
    # The relational commit happened: the node is the truth, the index lags.
    event = next(n for n in mem.nodes() if n.type.value == "event")
    drift = mem.admin.verify()
    assert drift.pending >= 1
    if point == "before_index":
        assert drift.missing == (event.id,)
    else:
        assert drift.missing == ()  # the vector went in; only the outbox row remains
    mem.close()

    again = reopen(open_memory, folder)
    state = again.recover()
    assert state.replayed >= 1
    assert again.admin.verify().clean
    assert again.index.ids(again.namespace) == live_ids(again) == {task.id, event.id}
    recall = again.retrieve("why was the claim returned?")
    assert event.id in recall.ids


def test_a_crash_inside_add_many_writes_nothing(open_memory, folder):
    faults = Faults()
    mem = open_memory(folder=folder, faults=faults)
    task = mem.add("服务器迁移任务", type="task")
    before = (live_ids(mem), mem.index.ids(mem.namespace), mem.admin.stats().log_seq)
    calls = []

    def hook(at: str) -> None:
        if at == "add_many_item":
            calls.append(at)
            if len(calls) == 2:
                raise Crash(at)

    faults.hook = hook
    with pytest.raises(Crash):
        mem.add_many([
            {"content": "迁移窗口定在周六凌晨两点", "type": "decision", "parent": task},
            {"content": "新机房的数据库是 PostgreSQL 15", "type": "fact", "parent": task},
            {"content": "演练已完成", "type": "state", "parent": task},
        ])
    assert (live_ids(mem), mem.index.ids(mem.namespace), mem.admin.stats().log_seq) == before
    faults.hook = None
    assert mem.admin.verify().clean


def test_verify_finds_each_kind_of_drift_and_repair_fixes_it(open_memory, folder):
    faults = Faults()
    mem = open_memory(folder=folder, faults=faults, write={"index_batch": 1})
    task = mem.add("Travel booking for the Berlin trip", type="task")
    hotel = mem.add("Hotel booked near the station", type="fact")
    flight = mem.add("Flight leaves at 07:40", type="fact")
    faults.hook = crash_at("before_index")
    with pytest.raises(Crash):
        mem.update(hotel, content="Hotel moved to the old town")  # index keeps the old vector
    with pytest.raises(Crash):
        mem.archive(flight)  # index keeps a vector of an archived node
    with pytest.raises(Crash):
        mem.add("Taxi ordered for 06:00", type="event")  # index lacks a live node
    faults.hook = None
    taxi = next(n for n in mem.nodes() if n.content.startswith("Taxi"))
    drift = mem.admin.verify()
    assert drift.stale == (hotel.id,)
    assert drift.extra == (flight.id,)
    assert drift.missing == (taxi.id,)
    assert drift.pending == 3 and not drift.clean

    found = mem.admin.repair()
    assert found.stale == (hotel.id,) and found.missing == () or found.pending == 0
    assert mem.admin.verify().clean
    assert mem.index.ids(mem.namespace) == live_ids(mem) == {task.id, hotel.id, taxi.id}


def test_reindex_rebuilds_the_index_from_the_store(open_memory, folder):
    mem = open_memory(folder=folder)
    mem.add("Code review of the payment module", type="task")
    ids = [n.id for n in mem.add_many([{"content": f"Review comment {i}: rename variable {i}", "type": "event"} for i in range(40)])]
    mem.index.delete(mem.namespace, ids[:10])  # someone broke the index
    assert len(mem.admin.verify().missing) == 10
    assert mem.admin.reindex() == 41
    assert mem.admin.verify().clean


def test_a_lost_index_folder_is_reported_and_repaired(open_memory, folder):
    mem = open_memory(folder=folder)
    task = mem.add("报销任务：张三的差旅费", type="task")
    mem.add("财务退回报销单，原因是发票不清晰", type="event")
    mem.close()
    shutil.rmtree(folder / "chroma")

    again = reopen(open_memory, folder)
    problems = again.recover().problems
    assert any("index is empty" in p for p in problems)
    # Still usable: writes and lexical retrieval work while the index is rebuilt.
    again.add("用户偏好：短信通知", type="preference", parent=task)
    assert task.id in again.retrieve("报销进度").ids
    drift = again.admin.repair()
    assert len(drift.missing) == 2
    assert again.admin.verify().clean
    assert again.recover().problems == ()


def test_a_corrupt_trailing_log_entry_is_reported_and_repaired(open_memory, folder):
    mem = open_memory(folder=folder)
    mem.add("Support ticket 4711: printer offline", type="task")
    last = mem.admin.stats().log_seq
    with mem.store.engine.begin() as conn:
        conn.execute(update(oplog).where(oplog.c.seq == last).values(payload='{"id": "abc", "cont'))
    mem.close()

    again = reopen(open_memory, folder)
    assert any(f"#{last} is corrupt" in p for p in again.recover().problems)
    node = again.add("Technician booked for Monday", type="event")  # the memory stays usable
    assert again.get(node).content == "Technician booked for Monday"
    assert again.admin.verify().corrupt_log == (last,)
    again.admin.repair()
    assert again.admin.verify().clean
    with again.store.engine.connect() as conn:
        payload = conn.execute(select(oplog.c.payload).where(oplog.c.seq == last)).scalar_one()
    assert json.loads(payload) == {"corrupt": True}


def test_a_stale_update_raises_a_conflict(open_memory, folder):
    first = open_memory(folder=folder)
    second = open_memory(folder=folder)
    node = first.add("The meeting is on Tuesday", type="fact", parent=ROOT)
    seen = second.get(node.id)
    first.update(node, content="The meeting moved to Wednesday", expected_version=node.version)
    with pytest.raises(ConflictError):
        second.update(seen.id, content="The meeting is on Thursday", expected_version=seen.version)
    assert first.get(node).content == "The meeting moved to Wednesday"


WRITER = textwrap.dedent(
    """
    import json, sys, torch
    torch.set_num_threads(1)
    from hybrid_memory import Config, MemoryTree
    folder, who, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # The test's own model (all-MiniLM-L6-v2), which the parent opens the memory with.
    bundled = Config.load(overrides={"embedding": {"model": "bundled"}})
    with MemoryTree.open(folder, namespace="t", config=bundled) as mem:
        task = mem.add(f"Task of writer {who}", type="task")
        print(json.dumps({"id": task.id}), flush=True)
        for i in range(count):
            node = mem.add(f"writer {who} note {i}: batch {i * 7} shipped", type="event", parent=task)
            print(json.dumps({"id": node.id}), flush=True)
    """
)


def sqlite_memory(folder: Path, embedder: Any) -> MemoryTree:
    """These tests are about several processes sharing one SQLite file and one
    embedded Chroma folder (PostgreSQL has its own in test_postgres.py)."""
    return MemoryTree.open(folder, namespace="t", embedder=embedder)


def test_several_writer_processes_lose_nothing(embedder, folder, tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writers = int(os.environ.get("HYBRID_MEMORY_WRITERS", "4"))
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    procs = [
        subprocess.Popen([sys.executable, str(script), str(folder), str(w), "15"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for w in range(writers)
    ]
    acked: set[str] = set()
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err  # never "database is locked", never a crash
        acked |= {json.loads(line)["id"] for line in out.splitlines()}
    assert len(acked) == writers * 16
    with sqlite_memory(folder, embedder) as mem:
        assert acked <= live_ids(mem)
        assert mem.admin.verify().clean
        assert mem.index.ids(mem.namespace) == live_ids(mem)


def test_a_reader_sees_what_another_process_wrote(embedder, folder, tmp_path):
    reader = sqlite_memory(folder, embedder)
    reader.add("Warehouse inventory count", type="task", parent=ROOT)
    reader.retrieve("inventory")  # the reader has loaded the index
    script = tmp_path / "other.py"
    script.write_text(textwrap.dedent(
        """
        import sys
        from hybrid_memory import MemoryTree, ROOT
        with MemoryTree.open(sys.argv[1], namespace="t") as mem:
            mem.add("Quarterly tax filing for the Munich office", type="task", parent=ROOT)
        """
    ))
    subprocess.run([sys.executable, str(script), str(folder)], check=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    recall = reader.retrieve("when is the tax declaration due?")
    reader.close()
    assert recall.branches and "tax filing" in recall.branches[0].title
    assert recall.nodes[0].dense > 0.2  # found by its vector, not only by words


def raw_index(folder: Path) -> ChromaIndex:
    """The index ``MemoryTree.open(folder)`` would make, to hand it ``index=`` and read
    it as it is (``MemoryTree.index`` first applies the index writes that wait)."""
    return ChromaIndex(folder / "chroma", graphs=Config.load().accel.in_memory_vectors)


def test_index_writes_wait_for_a_batch_and_nothing_written_is_missed_meanwhile(open_memory, folder):
    index = raw_index(folder)
    mem = open_memory(folder=folder, index=index, write={"index_batch": 4})
    task = mem.add("Travel booking for the Berlin offsite", type="task")
    hotel = mem.add("Hotel Adlon confirmed for three nights", type="fact")
    mem.add("差旅预算上限为每晚 200 欧元", type="fact")
    assert index.ids(mem.namespace) == set()  # three writes wait in the outbox
    # Found by meaning before the index has it, and a twin of a waiting memory merges.
    assert hotel.id in mem.retrieve("which hotel did we book?").ids
    again = mem.add("Hotel Adlon confirmed for three nights.", type="fact")
    assert again.merged and again.id == hotel.id
    assert index.ids(mem.namespace) == set()  # a merge writes no vector
    fourth = mem.add("Flight LH 2037 leaves at 07:40", type="fact")
    assert index.ids(mem.namespace) == {task.id, hotel.id, fourth.id} | {
        n.id for n in mem.nodes() if n.content.startswith("差旅")}
    # Waiting writes survive a crash (no close): the next open applies them.
    late = mem.add("Taxi to the airport at 05:30", type="event")
    assert late.id not in index.ids(mem.namespace)
    other_index = raw_index(folder)
    other = open_memory(folder=folder, index=other_index)  # (as reopen, reading its raw index)
    assert late.id in other_index.ids(other.namespace) and other.admin.verify().clean
    # Reading through MemoryTree.index applies what waits first.
    extra = other.add("Return flight on Friday evening", type="fact")
    assert extra.id in other.index.ids(other.namespace)


class _DrainedWhileAsked:
    """A Chroma index that another process drains while a query runs: the query
    answers from before the drain, the outbox is read after it."""

    def __init__(self, inner: Any, store: Any) -> None:
        self.inner, self.store, self.armed = inner, store, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def query(self, namespace: str, vectors: Any, n: int) -> Any:
        answer = self.inner.query(namespace, vectors, n)
        if self.armed:
            self.armed = False
            from hybrid_memory.recovery import drain_outbox

            drain_outbox(self.store, self.inner, namespace)
        return answer


@pytest.mark.parametrize("own_read", [True, False], ids=["own-read", "caller-read"])
@pytest.mark.parametrize("content", ["The invoice INV-77 was paid on Monday.", "发票INV-77已在周一付款。"], ids=["en", "zh"])
def test_a_write_drained_during_a_query_is_still_found(tmp_path: Path, embedder: Any, content: str,
                                                       own_read: bool) -> None:
    from hybrid_memory import Config
    from hybrid_memory.store.sql import SqlStore
    from hybrid_memory.store.vectors import ChromaIndex

    store = SqlStore(f"sqlite:///{tmp_path / 'memory.db'}")
    index = _DrainedWhileAsked(ChromaIndex(tmp_path / "chroma"), store)
    mem = MemoryTree.open(tmp_path, store=store, index=index, embedder=embedder,  # type: ignore[arg-type]
                          config=Config.load(overrides={"write": {"index_batch": 16}}))
    try:
        mem.add("Pay the supplier", type="task", parent=ROOT)
        node = mem.add(content, type="fact")  # waits in the outbox for its batch
        vec = embedder.embed([content])
        index.armed = True
        from hybrid_memory.recovery import nearest

        if own_read:
            ids = [i for i, _ in nearest(store, index, mem.namespace, vec, 5)[0]]
        else:  # the outbox read in the caller's read transaction, as retrieval does
            with store.reading() as conn:
                ids = [i for i, _ in nearest(store, index, mem.namespace, vec, 5, conn)[0]]
        assert node.id in ids
        assert index.inner.ids(mem.namespace) >= {node.id}  # the drain did happen in between
    finally:
        mem.close()

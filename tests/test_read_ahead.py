"""A small write embeds on a worker thread while its transaction reads, and a single
add whose twin question the words settle is written before its vector arrives
(``embedding_worker.READ_AHEAD_ITEMS``, ``Writer._read_ahead``, ``Writer._settled_by_words``).
None of that may change what is written: the same merges, the real embeddings,
nothing left behind by a failed embedding. Real model, SQLite and PostgreSQL."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid_memory import ROOT, ChromaIndex, Config, MemoryTree, context
from hybrid_memory.embedding_worker import READ_AHEAD_ITEMS
from hybrid_memory.testing import Faults


class Spy:
    """The real embedder, noting the thread of every call; ``fail_on`` makes a call
    holding that text raise."""

    def __init__(self, inner: Any, fail_on: str | None = None) -> None:
        self.inner, self.fail_on = inner, fail_on
        self.threads: list[threading.Thread] = []

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def embed(self, texts: Sequence[str]) -> Any:
        self.threads.append(threading.current_thread())
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError("the embedder failed")
        return self.inner.embed(texts)

    def coverage(self, text: str) -> float:
        return float(self.inner.coverage(text))


def under_task(embedder: Any, content: str) -> np.ndarray:
    """The stored vector of ``content`` written under the task "Plan the offsite"."""
    return context.embed(embedder, [(content, ("Plan the offsite",))])[0]


def ops(mem: MemoryTree) -> list[str]:
    """The operation log's kinds of entry, in order."""
    from sqlalchemy import select

    from hybrid_memory.store.schema import oplog

    with mem.store.reading() as conn:
        return list(conn.execute(select(oplog.c.op).where(oplog.c.namespace == mem.namespace)
                                 .order_by(oplog.c.seq)).scalars())


def stored(mem: MemoryTree, ids: Sequence[str]) -> dict[str, np.ndarray]:
    with mem.store.reading() as conn:
        return mem.store.nodes.embeddings(conn, list(ids))


def state(mem: MemoryTree) -> tuple[Any, ...]:
    with mem.store.reading() as conn:
        seq = mem.store.log.last_seq(conn, mem.namespace)
    nodes = [(n.id, n.content, n.version, round(n.confidence, 9), n.status) for n in mem.nodes(include_archived=True)]
    return nodes, seq, mem.index.ids(mem.namespace)


FACTS_EN = [
    "The server migration is scheduled for Friday night.",
    "Server migration is scheduled for Friday night.",
    "The backup finished at 02:00 without errors.",
    "Alice prefers the staging cluster for load tests.",
    "The load balancer config was rolled back.",
    "The server migration was moved to Saturday night.",
    "The backup finished at 03:00 without errors.",  # the same words as one above, another figure
]
FACTS_ZH = [
    "报销单已经提交给财务部门审批。",
    "报销单已经提交给财务部门审批了。",
    "机票改签到周五下午三点。",
    "张伟更喜欢靠窗的座位。",
    "酒店预订已经确认，共三晚。",
    "报销单被财务部门退回，需要补发票。",
    "机票改签到周五下午四点。",
]


@pytest.mark.parametrize("facts", [FACTS_EN, FACTS_ZH], ids=["en", "zh"])
def test_single_adds_store_their_real_embeddings(open_memory, embedder, facts, monkeypatch):
    mem = open_memory()
    late: list[str] = []
    settle = mem.store.nodes.settle_embeddings
    monkeypatch.setattr(mem.store.nodes, "settle_embeddings", lambda conn, ns, pairs: (late.extend(i for i, _ in pairs),
                                                                                        settle(conn, ns, pairs)))
    task = mem.add("Trip and expenses" if facts is FACTS_EN else "出差与报销", type="task", parent=ROOT)
    written = [mem.add(f, type="fact") for f in facts]
    new = [n for n in written if not n.merged]
    assert len(late) >= 4 and set(late) <= {n.id for n in new}  # most went the early way
    vectors = stored(mem, [n.id for n in new])
    want = context.embed(embedder, [(n.content, (task.content,)) for n in new])  # each read under its task
    for n, v in zip(new, want, strict=True):
        np.testing.assert_allclose(vectors[n.id], v, atol=1e-5)
        assert float(np.linalg.norm(vectors[n.id])) == pytest.approx(1.0, abs=1e-4)  # never the placeholder
    mem.flush()
    top = mem.index.query(mem.namespace, want[-1:], 1)[0]  # the index got the real vector too
    assert top[0][0] == new[-1].id


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.lists(st.integers(0, len(FACTS_EN) + len(FACTS_ZH) - 1), min_size=4, max_size=14),
       crowd=st.integers(0, 11))
def test_the_early_write_decides_every_twin_as_embedding_first_does(open_memory, tmp_path_factory, order, crowd):
    """The same adds, into a memory that embeds first and one that reads ahead and
    writes early: the same merges, the same stored embeddings. ``crowd`` fills the
    branch past what dedup compares, so both ways of finding the nearest are used."""
    pool = FACTS_EN + FACTS_ZH
    results = []
    for ahead in (False, True):
        # Not ahead: each write embedded whole before its transaction (no read-ahead,
        # no early write), the plain path the other must agree with.
        mem = open_memory(folder=tmp_path_factory.mktemp("mem"), write={"overlap_embedding": ahead})
        mem.add("Migrate the production database server", type="task", parent=ROOT)
        for i in range(crowd):
            mem.add(f"Checklist item {i}: verify replica lag on node db-{i}.", type="fact")
        got = [mem.add(pool[i], type="fact") for i in order]
        live = mem.nodes()
        vectors = stored(mem, [n.id for n in live])
        # (ids are random: nodes are compared by what they hold)
        results.append(([(n.merged, mem.get(n.id).content, n.confidence, n.version) for n in got],
                        {n.content: vectors[n.id] for n in live}, ops(mem), mem.active.content))
    (merges_a, vecs_a, ops_a, active_a), (merges_b, vecs_b, ops_b, active_b) = results
    assert merges_a == merges_b
    assert (ops_a, active_a) == (ops_b, active_b)
    assert sorted(vecs_a) == sorted(vecs_b)
    for content, v in vecs_a.items():
        np.testing.assert_allclose(v, vecs_b[content], atol=1e-5)


def test_a_twin_found_by_its_vector_still_merges(open_memory):
    """A candidate passes the word tests, so the write waits for the vector."""
    mem = open_memory()
    mem.add("Migrate the production database server", type="task", parent=ROOT)
    first = mem.add(FACTS_EN[0], type="fact")
    again = mem.add(FACTS_EN[1], type="fact")
    assert again.merged and again.id == first.id


@pytest.mark.parametrize("contents", [["One.", "Two.", "Three."], ["预算。", "行程。"]], ids=["en", "zh"])
def test_a_failed_embedding_of_a_batch_writes_nothing(open_memory, embedder, contents):
    spy = Spy(embedder, fail_on=contents[-1])
    mem = open_memory(embedder_=spy)
    mem.add("Plan the offsite", type="task", parent=ROOT)
    mem.add("The offsite is in Lisbon.", type="fact")
    before = state(mem)
    with pytest.raises(RuntimeError, match="the embedder failed"):
        mem.add_many([{"content": c, "type": "fact"} for c in contents])
    assert state(mem) == before
    assert mem.add("The venue holds forty people.", type="fact").merged is False  # the handle still works


def test_small_writes_embed_on_the_worker_and_close_stops_it(open_memory, embedder):
    spy = Spy(embedder)
    mem = open_memory(embedder_=spy)
    mem.add("Plan the offsite", type="task", parent=ROOT)
    calls = len(spy.threads)
    mem.add_many([{"content": f"Offsite detail number {i}.", "type": "fact"} for i in range(READ_AHEAD_ITEMS)])
    mem.add_many([{"content": f"Agenda line number {i}.", "type": "event"} for i in range(READ_AHEAD_ITEMS + 1)])
    worker, caller = spy.threads[calls:]
    assert worker.name.startswith("hybrid-memory-embed") and worker is not threading.current_thread()
    assert caller is threading.current_thread()  # a larger batch embeds before its transaction
    assert len(mem.nodes()) == 2 * READ_AHEAD_ITEMS + 2
    mem.close()
    assert not worker.is_alive()


def test_the_first_embedding_and_the_setting_keep_it_in_the_caller(open_memory, embedder):
    """A handle's first embedding (which may load the model) runs before any
    transaction, in the caller; so does every one with write.overlap_embedding off."""
    for overlap in (True, False):
        spy = Spy(embedder)
        mem = open_memory(namespace=f"o{overlap}", embedder_=spy, write={"overlap_embedding": overlap})
        mem.add("Plan the offsite", type="task", parent=ROOT)
        mem.add("The offsite is in Lisbon.", type="fact")
        mem.retrieve("Where is the offsite?")
        here = [t is threading.current_thread() for t in spy.threads]
        assert here == ([True, False, False] if overlap else [True, True, True])


class HoldsTheLock(Spy):
    """The real embedder, declaring that it keeps the interpreter lock while it
    computes (as sentence-transformers on torch does)."""

    releases_gil = False


def test_an_embedder_that_keeps_the_interpreter_lock_embeds_in_the_caller(open_memory, embedder):
    """Writes and queries of an embedder with ``releases_gil = False`` embed in the
    caller, before their transaction; the same memories are written and found."""
    got = []
    for spy in (Spy(embedder), HoldsTheLock(embedder)):
        mem = open_memory(namespace=type(spy).__name__, embedder_=spy)
        mem.add("Plan the offsite", type="task", parent=ROOT)
        mem.add("The offsite is in Lisbon.", type="fact")
        mem.add("The offsite is in Lisbon!", type="fact")  # a twin: merged either way
        found = mem.retrieve("Where is the offsite?")
        here = [t is threading.current_thread() for t in spy.threads]
        holds = isinstance(spy, HoldsTheLock)
        assert here == ([True] * 4 if holds else [True, False, False, False])
        got.append(([n.content for n in mem.nodes()], [s.node.content for s in found.nodes]))
    assert got[0] == got[1]


def test_the_bundled_runtimes_say_whether_they_release_the_interpreter_lock(embedder):
    from hybrid_memory.embed import SentenceTransformerEmbedder
    from hybrid_memory.embed.onnx_model import OnnxEmbedder

    assert SentenceTransformerEmbedder.releases_gil is False
    assert OnnxEmbedder().releases_gil is True  # onnxruntime is installed with the project
    # An ONNX embedder that falls back to sentence-transformers says what its fallback says.
    fallback = OnnxEmbedder("/nonexistent/model", fallback=SentenceTransformerEmbedder())
    assert fallback.releases_gil is False


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_small_batch_writes_what_embedding_first_writes(open_memory, tmp_path_factory, lang):
    """Batches read ahead on the worker's time, with twins inside the batch and
    against stored memories, and items under earlier items of the batch: the same
    nodes, merges and embeddings as embedding first."""
    pool = FACTS_EN if lang == "en" else FACTS_ZH
    batches: list[list[dict[str, Any]]] = [[{"key": "t", "content": "Offsite" if lang == "en" else "团建", "type": "task",
                                             "parent": ROOT}]]
    for b in range(6):
        batches.append([{"content": pool[(b + i) % len(pool)] if i % 2 == 0 else f"Note {b}-{i} about the offsite.",
                         "type": "fact", "parent": "t" if b == 0 else None} for i in range(1 + b)])
    batches[1].insert(0, batches[0].pop())  # the task and its first facts in one batch
    got = []
    for ahead in (False, True):
        # Not ahead: each write embedded whole before its transaction (no read-ahead,
        # no early write), the plain path the other must agree with.
        mem = open_memory(folder=tmp_path_factory.mktemp("mem"), write={"overlap_embedding": ahead})
        mem.add(pool[0], type="fact", parent=ROOT)
        out = [n for batch in batches if batch for n in mem.add_many(batch)]
        live = mem.nodes()
        vectors = stored(mem, [x.id for x in live])
        got.append(([(x.merged, mem.get(x.id).content) for x in out], {x.content: vectors[x.id] for x in live}))
    assert got[0][0] == got[1][0]
    assert sum(m for m, _ in got[1][0]) >= 5  # the pool's lines come back: merged
    assert sorted(got[0][1]) == sorted(got[1][1])
    for content, v in got[0][1].items():
        np.testing.assert_allclose(v, got[1][1][content], atol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_embedders_answer_threads_as_they_answer_one(embedder: Any, backend: str) -> None:
    """A write embeds on its worker while dedup asks the same embedder for coverage on
    the caller's thread: concurrent calls must give what sequential calls give."""
    from hybrid_memory import Config
    from hybrid_memory.embed import make_embedder

    e = embedder if backend == "torch" else make_embedder(Config.load(overrides={"embedding": {"backend": "onnx"}}).embedding)
    texts = [f"{'word ' * (1 + i % 17)}item {i} 报销 {'单' * (i % 5)}" for i in range(24)]
    batches = [texts[i : i + 1 + i % 6] for i in range(len(texts))]
    want_vectors = [e.embed(b) for b in batches]
    want_coverage = [e.coverage(t) for t in texts]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: a race shows up in a few rounds
    try:
        _race(e, batches, texts, want_vectors, want_coverage)
    finally:
        sys.setswitchinterval(switch)


def _race(e: Any, batches: list[list[str]], texts: list[str], want_vectors: list[Any], want_coverage: list[float]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        for _ in range(10):
            calls = [(pool.submit(e.embed, b), pool.submit(e.coverage, t)) for b, t in zip(batches, texts, strict=True)]
            for (vectors, coverage), want_v, want_c in zip(calls, want_vectors, want_coverage, strict=True):
                np.testing.assert_allclose(vectors.result(), want_v, atol=1e-5)
                assert coverage.result() == want_c


# -- a single add commits before its vector ---------------------------------------


class Crash(Exception):
    pass


def crash_before_vector(point: str) -> None:
    if point == "before_vector":
        raise Crash(point)


def outbox_actions(mem: MemoryTree, node_id: str) -> list[str]:
    with mem.store.reading() as conn:
        return [r.action for r in mem.store.outbox.pending(conn, mem.namespace) if r.node_id == node_id]


def only_new(mem: MemoryTree, before: set[str]) -> str:
    (new,) = {n.id for n in mem.nodes()} - before
    return new


@pytest.mark.parametrize("content,question", [
    ("The offsite hotel is the Hotel Avenida in Lisbon.", "Which hotel did we book for the offsite?"),
    ("团建的酒店订在里斯本的阿韦尼达酒店。", "团建订的是哪家酒店？"),
], ids=["en", "zh"])
def test_a_crash_between_the_two_commits_leaves_the_memory_and_the_next_open_embeds_it(
        open_memory, embedder, tmp_path, content, question):
    folder = tmp_path / "crash"
    faults = Faults()
    mem = open_memory(folder=folder, faults=faults)
    mem.add("Plan the offsite", type="task", parent=ROOT)
    mem.add("The offsite is in the first week of May.", type="fact")
    before = {n.id for n in mem.nodes()}
    faults.hook = crash_before_vector
    with pytest.raises(Crash):
        mem.add(content, type="fact")
    faults.hook = None
    new = only_new(mem, before)
    # Committed (the memory is the truth), without its vector yet.
    assert mem.get(new).content == content
    assert new not in stored(mem, [new])
    assert outbox_actions(mem, new) == ["embed"]
    # Another handle reads meanwhile: found by its words, nothing fails; a drain
    # there keeps the node's row for its vector.
    other = open_memory(folder=folder, session="reader")
    assert outbox_actions(other, new) == []  # (its open embedded it already)
    mem.close()
    other.close()

    again = open_memory(folder=folder)
    assert outbox_actions(again, new) == []
    np.testing.assert_allclose(stored(again, [new])[new], under_task(embedder, content), atol=1e-5)
    drift = again.admin.verify()
    assert not drift.missing and not drift.stale and drift.pending == 0
    assert new in {n.node.id for n in again.retrieve(question).nodes}


def test_a_reader_during_the_window_finds_the_memory_by_its_words(open_memory, tmp_path):
    """Between the two commits (held open here by a crash), what another process
    sees: a memory with no vector. Retrieval, dedup, verify, a drain, export and
    repair all go on."""
    from hybrid_memory.recovery import drain_outbox

    faults = Faults()
    folder = tmp_path / "window"
    # The index MemoryTree.open would make, kept to drain into as it is (not through
    # MemoryTree.index, which first applies the index writes that wait).
    index = ChromaIndex(folder / "chroma", graphs=Config.load().accel.in_memory_vectors)
    mem = open_memory(folder=folder, faults=faults, index=index)
    mem.add("Plan the offsite", type="task", parent=ROOT)
    mem.add("The offsite is in the first week of May.", type="fact")
    before = {n.id for n in mem.nodes()}
    # The window itself, held open: a node with the empty blob and its EMBED row.
    faults.hook = crash_before_vector
    with pytest.raises(Crash):
        mem.add("The venue has a projector and two microphones.", type="fact")
    faults.hook = None
    held = only_new(mem, before)
    drain_outbox(mem.store, index, mem.namespace)
    assert outbox_actions(mem, held) == ["embed"]
    hits = mem.retrieve("venue projector microphones")
    assert held in {n.node.id for n in hits.nodes}  # by its words alone
    assert held not in stored(mem, [held])
    twin = mem.add("The venue has a projector and two microphones.", type="fact")  # an exact twin: merged
    assert twin.merged and twin.id == held
    assert mem.admin.verify().missing == ()
    snapshot = tmp_path / "snap.jsonl"
    mem.admin.export(snapshot)
    copy = open_memory(folder=tmp_path / "copy")
    copy.admin.import_(snapshot)
    assert held in stored(copy, [held])  # the import embedded it
    mem.admin.repair()  # and repair embeds what waits
    assert outbox_actions(mem, held) == []
    assert held in stored(mem, [held])


def test_the_vector_commit_never_overwrites_an_update(open_memory, embedder):
    """An update that re-embedded the content between the two commits keeps its vector."""
    faults = Faults()
    mem = open_memory(faults=faults)
    mem.add("Plan the offsite", type="task", parent=ROOT)
    before = {n.id for n in mem.nodes()}
    changed = "The offsite budget was raised to 12,000 euros."

    def update_first(point: str) -> None:
        if point == "before_vector":
            faults.hook = None
            mem.update(only_new(mem, before), content=changed)

    faults.hook = update_first
    node = mem.add("The offsite budget is 9,000 euros.", type="fact")
    assert mem.get(node.id).content == changed
    np.testing.assert_allclose(stored(mem, [node.id])[node.id], under_task(embedder, changed), atol=1e-5)
    assert set(outbox_actions(mem, node.id)) <= {"upsert"}  # (applied, or waiting for its batch)


@pytest.mark.parametrize("content", ["Book the hotel for the offsite.", "报销单已经提交给财务部门审批。"], ids=["en", "zh"])
def test_a_failed_embedding_of_a_single_add_keeps_the_memory_for_the_next_open(
        open_memory, embedder, tmp_path, content):
    """The add committed while the embedder ran: the failure is raised, the memory
    stays (found by its words), the open says it waits, and a reopen with a working
    embedder embeds it."""
    folder = tmp_path / "fail"
    spy = Spy(embedder, fail_on=content)
    mem = open_memory(folder=folder, embedder_=spy)
    mem.add("Plan the offsite", type="task", parent=ROOT)
    mem.add("The offsite is in Lisbon.", type="fact")
    before = {n.id for n in mem.nodes()}
    with pytest.raises(RuntimeError, match="the embedder failed"):
        mem.add(content, type="fact")
    new = only_new(mem, before)
    assert mem.get(new).content == content and new not in stored(mem, [new])
    mem.close()
    broken = open_memory(folder=folder, embedder_=Spy(embedder, fail_on=content))
    assert any("wait for their vectors" in p for p in broken.recover().problems)
    broken.close()
    fixed = open_memory(folder=folder)
    assert not fixed.recover().problems
    np.testing.assert_allclose(stored(fixed, [new])[new], under_task(embedder, content), atol=1e-5)


def test_the_vector_commit_does_not_wait_for_the_disk(stores, tmp_path):
    """write(synced=False) commits without syncing (SQLite synchronous=NORMAL,
    PostgreSQL synchronous_commit off); every other write syncs."""
    mem = stores.open(tmp_path / "sync", namespace="s")
    store = mem.store

    def level(conn: Any) -> str:
        if store.is_postgres:
            return str(conn.exec_driver_sql("SHOW synchronous_commit").scalar())
        return {0: "off", 1: "normal", 2: "full", 3: "extra"}[int(conn.exec_driver_sql("PRAGMA synchronous").scalar())]

    got = [store.write(level), store.write(level, synced=False), store.write(level)]
    assert got == (["on", "off", "on"] if store.is_postgres else ["full", "normal", "full"])
    mem.close()

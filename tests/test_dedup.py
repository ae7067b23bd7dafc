"""Deduplication on write, with the real model: a near-identical memory of the same type
in the same branch reinforces the existing node instead of creating a twin."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_memory import ROOT, MemoryTree, Node, text
from hybrid_memory.dedup import is_twin


def snapshot(mem: MemoryTree) -> tuple[list[str], set[str]]:
    """(every node id, live or archived, in tree order; the vector index's ids)."""
    return [n.id for n in mem.nodes(include_archived=True)], mem.index.ids(mem.namespace)


def cosine(mem: MemoryTree, a: str, b: str) -> float:
    v = mem.embedder.embed([a, b])
    return float(np.dot(v[0], v[1]))


def assert_merged(mem: MemoryTree, first: Node, again: Node, before: tuple[list[str], set[str]], merges: int = 1) -> None:
    step = mem.config.dedup.confidence_step
    assert again.merged is True
    assert again.id == first.id
    assert again.content == first.content  # the existing memory stays as written
    assert again.confidence == pytest.approx(min(1.0, first.confidence + merges * step))
    assert again.version == first.version + merges
    assert snapshot(mem) == before  # no new row, the vector index untouched
    stored = mem.get(first.id)
    assert stored.confidence == pytest.approx(again.confidence)
    assert stored.merged is False  # merged describes an add() result, not the stored node


@pytest.fixture
def mem(open_memory: Any) -> MemoryTree:
    m: MemoryTree = open_memory()
    m.add("Migrate the production database server", type="task", parent=ROOT)  # becomes active
    return m


# -- merges -------------------------------------------------------------------------


def test_near_identical_english_memory_reinforces_the_existing_node(mem, clock):
    first = mem.add("The server migration is scheduled for Friday night.", type="fact")
    assert first.merged is False
    before = snapshot(mem)
    near = "Server migration is scheduled for Friday night."
    assert cosine(mem, first.content, near) >= mem.config.dedup.similarity  # English: the embedding decides
    assert first.content != near
    clock.advance(3600)
    again = mem.add(near, type="fact")
    assert_merged(mem, first, again, before)
    # The merge counts as activity: the node is fresher than before.
    assert mem.get(first).touched_at == clock.now


def test_near_identical_chinese_memory_reinforces_the_existing_node(mem, clock):
    first = mem.add("报销单已经提交给财务部门审批。", type="state")
    before = snapshot(mem)
    near = "报销单已经提交给财务部门审批了。"
    assert text.overlap(first.content, near) >= mem.config.dedup.lexical
    assert is_twin(first.content, near, cosine(mem, first.content, near), config=mem.config, embedder=mem.embedder)
    clock.advance(60)
    again = mem.add(near, type="state")
    assert_merged(mem, first, again, before)
    # And once more: confidence keeps rising by the step, still one node.
    third = mem.add("报销单已经提交给财务部门审批啦。", type="state")
    assert_merged(mem, first, third, before, merges=2)


@pytest.mark.parametrize(
    "variant", ["报销单已经提交给财务部门审批！", "报销单已经提交给财务部门审批了"], ids=["exclamation", "no-full-stop"]
)
def test_chinese_memory_differing_only_in_punctuation_merges(mem, variant):
    first = mem.add("报销单已经提交给财务部门审批。", type="state")
    assert text.overlap(first.content, variant) >= mem.config.dedup.lexical
    before = snapshot(mem)
    again = mem.add(variant, type="state")
    assert_merged(mem, first, again, before)


def test_exact_repeats_merge_and_raise_confidence_each_time(mem, clock):
    first = mem.add("The user prefers rollback scripts to be tested first.", type="preference")
    before = snapshot(mem)
    for n in range(1, 4):
        clock.advance(60)
        # Only whitespace differs on the third repeat: still the same memory.
        content = first.content if n < 3 else "  The user prefers rollback   scripts to be tested first.\n"
        again = mem.add(content, type="preference")
        assert_merged(mem, first, again, before, merges=n)
    # Importance never goes down on a merge, and a more important repeat raises it.
    louder = mem.add(first.content, type="preference", importance=1.0)
    assert louder.merged and louder.id == first.id and louder.importance == 1.0
    quieter = mem.add(first.content, type="preference", importance=0.1)
    assert quieter.merged and quieter.importance == 1.0
    assert snapshot(mem) == before


def test_confidence_is_capped_at_one(mem):
    first = mem.add("The old server has 64 GB of RAM.", type="fact", confidence=0.98)
    again = mem.add("The old server has 64 GB of RAM.", type="fact")
    assert again.merged and again.id == first.id and again.confidence == 1.0


# -- no merges -------------------------------------------------------------------------


def test_different_chinese_memory_of_the_same_length_does_not_merge(mem):
    """all-MiniLM-L6-v2 reads both sentences as twelve [UNK] tokens and a full stop:
    their embeddings are the same vector. Only the lexical check tells them apart."""
    a = "报销单已经提交给财务审批。"
    b = "酒店预订已经发给经理确认。"
    assert len(a) == len(b)
    assert mem.embedder.coverage(a) < 0.2 and mem.embedder.coverage(b) < 0.2
    assert cosine(mem, a, b) >= mem.config.dedup.similarity  # the dense check alone would merge them
    assert text.overlap(a, b) < mem.config.dedup.lexical
    first = mem.add(a, type="fact")
    ids_before, index_before = snapshot(mem)
    second = mem.add(b, type="fact")
    assert second.merged is False and second.id != first.id
    assert second.content == b
    assert len(mem.nodes()) == len(ids_before) + 1
    assert mem.index.ids(mem.namespace) == index_before | {second.id}
    assert mem.get(first).confidence == first.confidence and mem.get(first).version == 1


def test_similar_but_different_english_memories_do_not_merge(mem):
    first = mem.add("The user prefers window seats on long flights.", type="preference")
    second = mem.add("The user prefers aisle seats on long flights.", type="preference")
    assert not second.merged and second.id != first.id
    assert len(mem.nodes()) == 3


def test_same_text_in_a_different_branch_does_not_merge(mem):
    task_a = mem.active
    assert task_a is not None
    fact = "The maintenance window is Saturday 02:00 to 06:00."
    in_a = mem.add(fact, type="fact", parent=task_a)
    task_b = mem.add("Upgrade the office network switches", type="task", parent=ROOT)
    in_b = mem.add(fact, type="fact", parent=task_b)
    assert in_b.merged is False and in_b.id != in_a.id
    assert in_b.branch_id == task_b.id != in_a.branch_id
    # Also not in a sub-task of the first task: that sub-task is a branch of its own.
    sub = mem.add("Migrate the reporting replica", type="task", parent=task_a)
    in_sub = mem.add(fact, type="fact", parent=sub)
    assert in_sub.merged is False and len({in_a.id, in_b.id, in_sub.id}) == 3
    # But under a non-task child of the first task it is the same branch: it merges.
    event = mem.add("Talked to operations about timing", type="event", parent=task_a)
    deeper = mem.add(fact, type="fact", parent=event)
    assert deeper.merged is True and deeper.id == in_a.id
    assert len(mem.index.ids(mem.namespace)) == len(mem.nodes()) == 7


def test_a_different_type_does_not_merge(mem):
    content = "Replication is running and the cutover needs approval."
    as_state = mem.add(content, type="state")
    as_event = mem.add(content, type="event")
    assert as_event.merged is False and as_event.id != as_state.id
    assert as_event.type.value == "event"
    # Two tasks are never twins either.
    t1 = mem.add("Write the cutover runbook", type="task", parent=ROOT)
    t2 = mem.add("Write the cutover runbook", type="task", parent=t1)
    assert t2.merged is False and t2.id != t1.id


def test_archived_node_is_not_a_twin(mem):
    first = mem.add("The team lead approves the cutover date.", type="fact")
    mem.archive(first)
    again = mem.add("The team lead approves the cutover date.", type="fact")
    assert again.merged is False and again.id != first.id
    assert mem.get(first).status.value == "archived"


def test_dedup_disabled_creates_twins(open_memory):
    mem = open_memory(dedup={"enabled": False})
    mem.add("Migrate the production database server", type="task", parent=ROOT)
    first = mem.add("The server migration is scheduled for Friday night.", type="fact")
    twin = mem.add("The server migration is scheduled for Friday night.", type="fact")
    near = mem.add("Server migration is scheduled for Friday night.", type="fact")
    assert not twin.merged and not near.merged
    assert len({first.id, twin.id, near.id}) == 3
    assert mem.get(first).confidence == first.confidence
    assert len(mem.nodes()) == 4 and len(mem.index.ids(mem.namespace)) == 4
    batch = mem.add_many([dict(content="重复的记忆。", type="fact"), dict(content="重复的记忆。", type="fact")])
    assert batch[0].id != batch[1].id and not any(n.merged for n in batch)


# -- batches -------------------------------------------------------------------------------


def test_add_many_merges_within_the_batch(mem):
    step = mem.config.dedup.confidence_step
    before = len(mem.nodes())
    out = mem.add_many([
        dict(content="The server migration is scheduled for Friday night.", type="fact"),
        dict(content="Server migration is scheduled for Friday night.", type="fact"),
        dict(content="The server migration is scheduled for Friday night", type="fact"),
        dict(content="报销单已经提交给财务部门审批。", type="state"),
        dict(content="报销单已经提交给财务部门审批。", type="state"),
        dict(content="The server migration is scheduled for Friday night.", type="event"),
    ])
    assert [n.merged for n in out] == [False, True, True, False, True, False]
    assert out[0].id == out[1].id == out[2].id
    assert out[3].id == out[4].id
    assert len({out[0].id, out[3].id, out[5].id}) == 3
    assert len(mem.nodes()) == before + 3
    assert len(mem.index.ids(mem.namespace)) == before + 3
    # Each merge reinforced the node once, as the same adds one by one would.
    fact = mem.get(out[0].id)
    assert fact.confidence == pytest.approx(0.7 + 2 * step)
    assert fact.version == 3
    assert out[2].confidence == pytest.approx(fact.confidence) and out[2].version == 3
    assert mem.get(out[3].id).confidence == pytest.approx(0.8 + step)


def test_add_many_merges_into_an_existing_node(mem):
    first = mem.add("报销单已经提交给财务部门审批。", type="state")
    before = snapshot(mem)
    out = mem.add_many([
        dict(content="报销单已经提交给财务部门审批了。", type="state"),
        dict(content="报销单已经提交给财务部门审批。", type="state"),
    ])
    assert [n.id for n in out] == [first.id, first.id] and all(n.merged for n in out)
    assert snapshot(mem) == before
    assert mem.get(first).confidence == pytest.approx(first.confidence + 2 * mem.config.dedup.confidence_step)


@pytest.mark.parametrize("line", ["Ran the nightly test suite: all green", "夜间测试全部通过"])
def test_add_many_finds_the_exact_twin_of_its_branch_among_many_copies(open_memory, line):
    """A routine line held by more branches than the nearest-neighbour check reads:
    each item merges into the copy of its own branch (named parent, or the active
    node's), an item under a task of the same batch or of another type does not."""
    mem = open_memory()
    tasks = [mem.add(f"Release {i}: ship build {i}", type="task", parent=ROOT) for i in range(12)]
    copies = {t.id: mem.add(line, type="event", parent=t) for t in tasks}
    assert mem.active is not None and mem.active.id == tasks[-1].id
    before = len(mem.nodes())
    out = mem.add_many([
        dict(content=line, type="event", parent=tasks[3].id),
        dict(content=line, type="event"),
        dict(content="Release 99: ship build 99", type="task", parent=ROOT, key="new"),
        dict(content=line, type="event", parent="new"),
        dict(content=line, type="fact", parent=tasks[5].id),
    ])
    assert out[0].merged and out[0].id == copies[tasks[3].id].id
    assert out[1].merged and out[1].id == copies[tasks[-1].id].id
    assert not out[3].merged and out[3].parent_id == out[2].id
    assert not out[4].merged and out[4].parent_id == tasks[5].id
    assert len(mem.nodes()) == before + 3


def test_memories_that_differ_in_a_figure_never_merge(mem):
    """Found by the multi-writer test: one term in seven differs, the embeddings are
    almost equal, yet 'batch 49' is not 'batch 7'."""
    first = mem.add("writer 1 note 1: batch 7 shipped", type="event")
    second = mem.add("writer 1 note 7: batch 49 shipped", type="event")
    assert text.overlap(first.content, second.content) >= mem.config.dedup.lexical
    assert not second.merged and second.id != first.id
    third = mem.add("报销金额 5000 元，已提交", type="fact")
    fourth = mem.add("报销金额 3000 元，已提交", type="fact")
    assert not fourth.merged and fourth.id != third.id


# The in-batch index of dedup's lexical gate (arithmetic only: sets of terms, no model).
_VOCAB = [f"w{i}" for i in range(12)] + ["发票", "票已", "酒店"]


@settings(max_examples=300, deadline=None)
@given(
    sets=st.lists(st.sets(st.sampled_from(_VOCAB), max_size=7), min_size=1, max_size=40),
    keys=st.lists(st.sampled_from(["a", "b"]), min_size=40, max_size=40),
    threshold=st.sampled_from([0.0, 0.1, 0.34, 0.5, 0.6, 2 / 3, 0.7, 0.85, 1.0]),
)
def test_the_batch_index_offers_every_row_the_lexical_gate_passes_in_written_order(
    sets: list[set[str]], keys: list[str], threshold: float
) -> None:
    from hybrid_memory.dedup import Earlier

    index = Earlier(sets, threshold)
    rows: list[tuple[tuple[str, str], dict[str, Any]]] = []
    for i, terms in enumerate(sets):
        key = (keys[i], "event")
        offered = index.candidates(key, terms)
        earlier = [r for k, r in rows if k == key]
        passing = [r for r in earlier if text.jaccard(r["term_set"], terms) >= threshold]
        ids = [r["i"] for r in offered]
        assert ids == sorted(ids)  # in written order: the first twin found is a full scan's
        assert {r["i"] for r in passing} <= set(ids)
        assert set(ids) <= {r["i"] for r in earlier}  # nothing of another (branch, type)
        row = {"i": i, "term_set": terms}
        index.add(key, row)
        rows.append((key, row))


def test_add_many_of_many_siblings_merges_what_a_full_scan_merges(open_memory: Any, tmp_path: Any) -> None:
    """Hundreds of siblings in one batch, with repeats that differ by a word: the same
    nodes merge as when each is added alone (which compares with every stored sibling)."""
    lines = [f"Shipment {i} for order {i % 37} left the warehouse on dock {i % 5}" for i in range(300)]
    lines += [line.replace("left", "has left") for line in lines[:40]]  # near-identical
    lines += lines[100:120]  # exact repeats
    batch = open_memory(folder=tmp_path / "batch")
    task = batch.add("Track the outbound shipments", type="task", parent=ROOT)
    out = batch.add_many([{"content": c, "type": "event", "parent": task} for c in lines])
    one = open_memory(folder=tmp_path / "one")
    task1 = one.add("Track the outbound shipments", type="task", parent=ROOT)
    alone = [one.add(c, type="event", parent=task1) for c in lines]
    assert [n.merged for n in out] == [n.merged for n in alone]
    assert sum(n.merged for n in out) >= 20
    by_content = {n.content for n in batch.children(task)}
    assert by_content == {n.content for n in one.children(task1)}


@pytest.mark.parametrize("line, variant", [
    ("Deployed the new payment service to the production cluster at noon on Friday",
     "Deployed the new payment service to the production cluster at noon on Friday as planned"),
    ("支付服务已在中午部署到生产环境", "支付服务已在中午部署到生产环境了"),
])
@pytest.mark.parametrize("batched", [False, True])
def test_the_twin_of_its_own_branch_is_found_behind_closer_copies_elsewhere(
    open_memory: Any, line: str, variant: str, batched: bool
) -> None:
    """More exact copies in other branches than dedup reads neighbours (12 > 8), all
    nearer the new memory than its near-identical twin in its own branch: the twin
    is still found, since a branch's memories of the type are scored whole."""
    mem = open_memory()
    for i in range(12):
        other = mem.add(f"Release {i}: ship build {i}", type="task", parent=ROOT)
        mem.add(variant, type="event", parent=other)
    mine = mem.add("Release 12: ship build 12", type="task", parent=ROOT)
    twin = mem.add(line, type="event", parent=mine)
    assert mem.config.dedup.candidates < 12
    again = (mem.add_many([dict(content=variant, type="event", parent=mine)])[0] if batched
             else mem.add(variant, type="event", parent=mine))
    assert again.merged and again.id == twin.id


def test_a_branch_too_large_to_score_whole_asks_the_vector_index(open_memory: Any, monkeypatch: Any) -> None:
    """Past batch_reads.SCAN_LIMIT memories of a type in a branch, the twin comes from the
    index's nearest neighbours (waiting index writes included), one query a batch."""
    from hybrid_memory import batch_reads, writing

    mem = open_memory()
    task = mem.add("Keep the on-call log", type="task", parent=ROOT)
    lines = ["Paged at 02:00 for disk usage on db-1", "Restarted the ingest worker after a memory leak",
             "Rotated the TLS certificate of the gateway", "Escalated the billing outage to the vendor"]
    # (each a twin of its line: the same terms, cosine 0.98-0.99 with all-MiniLM-L6-v2)
    variants = ["Paged at 02:00 for the disk usage on db-1", "Restarted the ingest worker after the memory leak",
                "Rotated the TLS certificate on the gateway", "Escalated the billing outage to a vendor"]
    first = [mem.add(x, type="event", parent=task) for x in lines]
    scanned: list[Any] = []
    original = type(mem.store.nodes).branch_vectors

    def spy(self: Any, conn: Any, ns: str, branch: str, ntype: str, limit: int) -> Any:
        out = original(self, conn, ns, branch, ntype, limit)
        scanned.append(out)
        return out

    monkeypatch.setattr(type(mem.store.nodes), "branch_vectors", spy)
    monkeypatch.setattr(batch_reads, "SCAN_LIMIT", 2)
    asked: list[int] = []
    nearest = writing.Writer.dedup_candidates
    monkeypatch.setattr(writing.Writer, "dedup_candidates",
                        lambda self, vectors: asked.append(len(vectors)) or nearest(self, vectors))
    out = mem.add_many([dict(content=x, type="event", parent=task) for x in variants[1:3]]
                       + [dict(content="Closed the incident review", type="event", parent=task)])
    assert scanned == [None]  # the branch holds more than the limit: not read whole
    assert asked == [3]  # one index query for the whole batch
    assert [n.id for n in out[:2]] == [first[1].id, first[2].id] and all(n.merged for n in out[:2])
    assert not out[2].merged
    again = mem.add(variants[3], type="event", parent=task)
    assert again.merged and again.id == first[3].id


def test_an_older_store_gets_the_dedup_index_on_open(open_memory: Any, tmp_path: Any) -> None:
    from sqlalchemy import text as sql_text

    mem = open_memory(folder=tmp_path / "old")
    mem.add("Plan the offsite", type="task", parent=ROOT)
    if not mem.store.is_sqlite:
        pytest.skip("the SQLite file is dropped and reopened here")
    with mem.store.engine.begin() as conn:
        conn.execute(sql_text("DROP INDEX hm_nodes_group"))
    mem.close()
    again = open_memory(folder=tmp_path / "old")
    with again.store.engine.connect() as conn:
        names = set(conn.execute(sql_text("SELECT name FROM sqlite_master WHERE type = 'index'")).scalars())
    assert "hm_nodes_group" in names

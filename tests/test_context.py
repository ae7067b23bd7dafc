"""A memory's vector reads it in its place in the tree (hybrid_memory.context): what
is stored, that retrieval finds a detail through its task, and that the vectors
below a renamed or moved task follow it, durably, on SQLite and PostgreSQL, in
English and Chinese, with the real model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sqlalchemy import update

from hybrid_memory import ROOT, Config, InvalidInputError, MemoryTree, context
from hybrid_memory.store.schema import from_blob, nodes, to_blob
from hybrid_memory.writing import Writer

CASES = {
    "en": dict(trip="Trip to Berlin", report="Quarterly sales report", step="Book the hotel",
               detail="It was moved to Thursday.", renamed="Trip to Munich",
               query="When is the hotel for the Munich trip?"),
    "zh": dict(trip="柏林出差", report="季度销售报告", step="预订酒店", detail="已经改到周四了。",
               renamed="慕尼黑出差", query="慕尼黑出差的酒店是哪天？"),
}


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> dict[str, str]:
    return CASES[request.param]


def stored(mem: MemoryTree, node_id: str) -> np.ndarray:
    with mem.store.reading() as conn:
        return mem.store.nodes.embeddings(conn, [node_id])[node_id]


def read_in(mem: MemoryTree, content: str, *above: str) -> np.ndarray:
    return context.embed(mem.embedder, [(content, tuple(above))])[0]


class Failing:
    """The real embedder, failing on every text that holds ``needle``."""

    def __init__(self, inner: Any, needle: str) -> None:
        self.inner, self.needle = inner, needle
        self.name, self.dim = inner.name, inner.dim

    def embed(self, texts: Any) -> np.ndarray:
        if any(self.needle in t for t in texts):
            raise RuntimeError("the embedder failed")
        return self.inner.embed(texts)

    def coverage(self, text: str) -> float:
        return float(self.inner.coverage(text))


def test_a_vector_is_the_content_with_its_ancestors_path_added(open_memory, case):
    mem = open_memory()
    trip = mem.add(case["trip"], type="task", parent=ROOT)
    step = mem.add(case["step"], type="task", parent=trip)
    detail = mem.add(case["detail"], type="event", parent=step)
    alone, placed = mem.embedder.embed([case["detail"], f"{case['trip']} > {case['step']}"])
    want = (alone + context.PATH_WEIGHT * placed) / np.linalg.norm(alone + context.PATH_WEIGHT * placed)
    np.testing.assert_allclose(stored(mem, detail.id), want, atol=1e-5)
    np.testing.assert_allclose(stored(mem, trip.id), mem.embedder.embed([case["trip"]])[0], atol=1e-5)  # a root: itself
    # A batch reads each item under the earlier items it names, as single adds do.
    batch = mem.add_many([{"key": "s", "content": case["step"], "type": "task", "parent": ROOT},
                          {"content": case["detail"], "type": "event", "parent": "s"}])
    np.testing.assert_allclose(stored(mem, batch[1].id), read_in(mem, case["detail"], case["step"]), atol=1e-5)
    assert mem.admin.verify().clean


class Counting:
    """The real embedder, recording every text it is given."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.texts = inner, []
        self.name, self.dim = inner.name, inner.dim

    def embed(self, texts: Any) -> np.ndarray:
        self.texts.extend(texts)
        return self.inner.embed(texts)

    def coverage(self, text: str) -> float:
        return float(self.inner.coverage(text))


def test_a_batch_too_deep_is_refused_before_anything_is_embedded(embedder, tmp_path, case):
    counting = Counting(embedder)
    config = Config.load(overrides={"write": {"max_depth": 3}})
    with MemoryTree.open(tmp_path / "m", embedder=counting, config=config) as mem:
        top = mem.add(case["trip"], type="task", parent=ROOT)
        counting.texts.clear()

        def chain(n: int) -> list[dict[str, Any]]:  # depths 1..n under the task
            return [{"key": f"k{i}", "content": f"{case['detail']} {i}", "type": "event",
                     "parent": top if i == 1 else f"k{i - 1}"} for i in range(1, n + 1)]

        with pytest.raises(InvalidInputError, match="depth 4; the limit is 3"):
            mem.add_many(chain(4))
        assert counting.texts == [] and [n.id for n in mem.nodes()] == [top.id]
        assert [n.depth for n in mem.add_many(chain(3))] == [1, 2, 3]  # exactly up to the limit


def test_memories_under_one_task_embed_its_path_once(embedder, tmp_path, case):
    counting = Counting(embedder)
    with MemoryTree.open(tmp_path / "m", embedder=counting) as mem:
        trip = mem.add(case["trip"], type="task", parent=ROOT)
        step = mem.add(case["step"], type="task", parent=trip)
        first = mem.add(case["detail"], type="event", parent=step)
        counting.texts.clear()
        second = mem.add(case["report"], type="event", parent=step)
        assert counting.texts == [case["report"]]  # the path "trip > step" was read with the first
        want = read_in(mem, case["report"], case["trip"], case["step"])
        np.testing.assert_allclose(stored(mem, second.id), want, atol=1e-5)
        assert first.id != second.id
    with MemoryTree.open(tmp_path / "m", embedder=counting) as mem:  # a new handle reads the path again
        counting.texts.clear()
        mem.add(case["renamed"], type="event", parent=step)
        assert counting.texts == [case["renamed"], f"{case['trip']} > {case['step']}"]


def test_the_same_detail_is_found_through_the_task_it_belongs_to(open_memory, case):
    mem = open_memory()
    found = {}
    for task in (case["report"], case["trip"]):
        t = mem.add(task, type="task", parent=ROOT)
        found[task] = mem.add(case["detail"], type="event", parent=t)
    mem.update(mem.path(found[case["trip"]])[0], content=case["renamed"])
    top = mem.retrieve(case["query"], k=5).nodes
    details = [s.node.id for s in top if s.node.content == case["detail"]]
    assert details and details[0] == found[case["trip"]].id


def test_the_vectors_below_a_renamed_or_moved_task_follow_it(open_memory, case):
    mem = open_memory()
    trip = mem.add(case["trip"], type="task", parent=ROOT)
    step = mem.add(case["step"], type="task", parent=trip)
    detail = mem.add(case["detail"], type="event", parent=step)
    mem.update(trip, content=case["renamed"])
    np.testing.assert_allclose(stored(mem, step.id), read_in(mem, case["step"], case["renamed"]), atol=1e-5)
    np.testing.assert_allclose(stored(mem, detail.id), read_in(mem, case["detail"], case["renamed"], case["step"]),
                               atol=1e-5)
    mem.update(step, content=case["step"] + "!")  # the node itself and what is below
    np.testing.assert_allclose(stored(mem, step.id), read_in(mem, case["step"] + "!", case["renamed"]), atol=1e-5)
    report = mem.add(case["report"], type="task", parent=ROOT)
    mem.move(step, report)
    np.testing.assert_allclose(stored(mem, detail.id), read_in(mem, case["detail"], case["report"], case["step"] + "!"),
                               atol=1e-5)
    mem.move(step, ROOT)
    np.testing.assert_allclose(stored(mem, step.id), read_in(mem, case["step"] + "!"), atol=1e-5)
    mem.flush()
    drift = mem.admin.verify()
    assert drift.clean, drift
    hit = mem.index.query(mem.namespace, stored(mem, detail.id)[None, :], 1)[0]
    assert hit[0][0] == detail.id  # the index holds the vector that followed


def test_a_rename_whose_vectors_fail_is_kept_and_the_next_open_reads_them(open_memory, embedder, tmp_path, case):
    folder = tmp_path / "fail"
    mem = open_memory(folder=folder)
    trip = mem.add(case["trip"], type="task", parent=ROOT)
    detail = mem.add(case["detail"], type="event", parent=trip)
    before = stored(mem, detail.id)
    mem.close()
    broken = open_memory(folder=folder, embedder_=Failing(embedder, case["detail"]))
    renamed = broken.update(trip.id, content=case["renamed"])  # committed: a root's vector reads no path
    assert renamed.content == case["renamed"]
    np.testing.assert_allclose(stored(broken, detail.id), before, atol=1e-6)  # kept meanwhile
    drift = broken.admin.verify()
    assert drift.out_of_context == (detail.id,) and not drift.clean
    broken.close()
    again = open_memory(folder=folder)
    np.testing.assert_allclose(stored(again, detail.id), read_in(again, case["detail"], case["renamed"]), atol=1e-5)
    assert again.admin.verify().clean


def test_an_item_whose_place_changed_after_it_was_read_is_embedded_where_it_went(open_memory, clock, case):
    """The write reads each item's path before its transaction; when the focus moved
    in between, the item is written without that vector and read where it went."""
    mem = open_memory()
    trip = mem.add(case["trip"], type="task", parent=ROOT)
    report = mem.add(case["report"], type="task", parent=ROOT)
    mem.focus(trip)
    writer = Writer(store=mem.store, index=mem.index, embedder=mem.embedder, config=mem.config,
                    namespace=mem.namespace, session=mem.session, clock=clock)
    item = writer.prepare({"content": case["detail"], "type": "event"}, 0)
    paths = writer.paths([item])
    assert paths == [(case["trip"],)]
    vectors = context.embed(mem.embedder, [(item.content, paths[0])])
    mem.focus(report)
    written = mem.store.write(lambda conn: writer.write_batch(conn, [item], vectors, paths))
    node = written.nodes[0]
    assert written.misread == (node.id,) and mem.get(node.id).parent_id == report.id
    mem.close()
    again = open_memory()
    np.testing.assert_allclose(stored(again, node.id), read_in(again, case["detail"], case["report"]), atol=1e-5)
    assert again.admin.verify().clean


def test_a_memory_made_before_vectors_read_their_path_is_read_again_when_opened(open_memory, case):
    mem = open_memory()
    trip = mem.add(case["trip"], type="task", parent=ROOT)
    detail = mem.add(case["detail"], type="event", parent=trip)
    alone = mem.embedder.embed([case["detail"]])[0]

    def as_before(conn: Any) -> None:  # what an earlier version stored
        conn.execute(update(nodes).where(nodes.c.id == detail.id).values(embedding=to_blob(alone)))
        mem.store.settings.set(conn, context.setting_key(mem.namespace), "")

    mem.store.write(as_before)
    assert from_blob(to_blob(alone)).shape == stored(mem, detail.id).shape
    mem.close()
    again = open_memory()
    np.testing.assert_allclose(stored(again, detail.id), read_in(again, case["detail"], case["trip"]), atol=1e-5)
    assert again.admin.verify().clean


def test_rewinding_a_rename_reads_the_vectors_below_with_the_earlier_name(open_memory, case):
    mem = open_memory()
    trip = mem.add(case["trip"], type="task", parent=ROOT)
    detail = mem.add(case["detail"], type="event", parent=trip)
    with mem.store.reading() as conn:
        seq = mem.store.log.last_seq(conn, mem.namespace)
    mem.update(trip, content=case["renamed"])
    mem.rewind(seq=seq)
    assert mem.get(trip.id).content == case["trip"]
    np.testing.assert_allclose(stored(mem, detail.id), read_in(mem, case["detail"], case["trip"]), atol=1e-5)
    mem.flush()
    assert mem.admin.verify().clean


def test_an_export_carries_vectors_read_in_context_and_an_import_keeps_them(open_memory, tmp_path, case):
    mem = open_memory()
    trip = mem.add(case["trip"], type="task", parent=ROOT)
    detail = mem.add(case["detail"], type="event", parent=trip)
    mem.admin.export(tmp_path / "out.jsonl")
    copy = open_memory(folder=tmp_path / "copy")
    copy.admin.import_(tmp_path / "out.jsonl")
    np.testing.assert_allclose(stored(copy, detail.id), stored(mem, detail.id), atol=1e-6)
    copy.flush()
    assert copy.admin.verify().clean

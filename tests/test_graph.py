"""The in-process vector graphs (``accel.in_memory_vectors``, hybrid_memory.accel.graph).

An embedded :class:`ChromaIndex` keeps a namespace's vectors in an HNSW graph in
the process, built on a thread from the namespace's second query on, and answers
queries from it. These tests hold its answers against Chroma's after every kind
of write, check that a copy is saved at close and loaded again, that it gives way
to Chroma as soon as another handle (another process) wrote, that a crash between
a save and a write never lets a stale copy answer, that an erased vector stays in
no saved file, and that retrieval answers the same with the graphs and without
them, in English and Chinese. Vectors come from the real model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hybrid_memory import ROOT, MemoryTree
from hybrid_memory.accel.graph import Graph, Graphs, remove_saved
from hybrid_memory.store.vectors import GRAPH_FOLDER, ChromaIndex, collection_name
from hybrid_memory.testing import abandon_graphs

NS = "t"

TEXTS = [
    "The flight to Lisbon leaves at 9:40 from gate B12",
    "Alice prefers window seats on long flights",
    "The hotel booking for the Porto trip is confirmed",
    "Ticket TKT-90: the printer on floor 3 will not connect",
    "The printer driver was reinstalled on Tuesday",
    "Finance asked for the taxi receipt too",
    "报销单 EXP-31：上海出差的酒店发票",
    "酒店发票金额是八百元",
    "打印机驱动已经重装",
    "重试间隔改为两秒",
    "The upload retries now wait two seconds",
    "Bob will review the pull request tomorrow",
]


@pytest.fixture
def vectors(embedder: Any) -> dict[str, np.ndarray[Any, Any]]:
    return dict(zip(TEXTS, embedder.embed(TEXTS), strict=True))


def _ids(n: int) -> list[str]:
    return [f"n{i:03d}" for i in range(n)]


def _graph_index(folder: Path) -> ChromaIndex:
    return ChromaIndex(folder / "chroma", graphs=True)


def _index(mem: MemoryTree) -> Any:
    """The memory's vector index, read as the ChromaIndex under it: ``mem.index``
    hands on what it does not have itself (``graphs``, ``wait_for_graph``)."""
    return mem.index


def _graphs(index: Any) -> Graphs:
    """The index's in-process graphs, which must be on."""
    graphs = index.graphs
    assert isinstance(graphs, Graphs)
    return graphs


def _counts(index: Any) -> tuple[int, int]:
    """(builds, loads) of the index's graphs so far."""
    graphs = _graphs(index)
    return graphs.builds, graphs.loads


def _ready(index: ChromaIndex, probe: np.ndarray[Any, Any]) -> None:
    """Ask twice (a handle's second query starts the copy) and wait for it."""
    index.query(NS, probe[None, :], 1)
    index.query(NS, probe[None, :], 1)
    assert index.wait_for_graph(NS, timeout=60)


def _saved_without_last(folder: Path, matrix: np.ndarray[Any, Any], ids: list[str]) -> None:
    """A folder whose graph was saved at close, holding every vector but the last."""
    first = _graph_index(folder)
    first.upsert(NS, ids[:-1], matrix[:-1])
    _ready(first, matrix[0])
    first.close()


def _same(index: ChromaIndex, probes: np.ndarray[Any, Any], n: int) -> None:
    """The graph and Chroma name the same nodes, nearest first, at the same similarities."""
    got, want = index.query(NS, probes, n), index.chroma_query(NS, probes, n)
    assert [[i for i, _ in row] for row in got] == [[i for i, _ in row] for row in want]
    for g_row, w_row in zip(got, want, strict=True):
        assert np.allclose([s for _, s in g_row], [s for _, s in w_row], atol=1e-4)


# -- the graph alone ----------------------------------------------------------------------


def test_a_graph_finds_what_was_written_and_not_what_was_deleted(vectors: dict[str, Any]) -> None:
    matrix = np.stack(list(vectors.values()))
    ids = _ids(len(matrix))
    g = Graph(None)
    assert g.search(matrix[:1], 5) == [[]]  # empty: no dimension yet, no answer
    g.upsert(ids, matrix)
    exact = np.argsort(-(matrix @ matrix.T), axis=1)
    for row, found in enumerate(g.search(matrix, 4)):
        assert [i for i, _ in found] == [ids[j] for j in exact[row, :4]]
        assert found[0][1] == pytest.approx(1.0, abs=1e-5)
    g.delete([ids[0], ids[0], "unknown"])
    assert g.live == len(ids) - 1
    assert ids[0] not in {i for i, _ in g.search(matrix[:1], len(ids))[0]}
    assert len(g.search(matrix[:1], 100)[0]) == len(ids) - 1  # never more than it holds
    g.upsert([ids[0]], matrix[:1])  # restored: found again, under its old label
    assert g.search(matrix[:1], 1)[0][0][0] == ids[0]
    assert g.live == len(ids)
    with pytest.raises(ValueError, match="dimension"):
        g.upsert(["other"], np.ones((1, 7), dtype=np.float32))


def test_a_saved_graph_answers_alike_and_keeps_no_deleted_vector(tmp_path: Path, vectors: dict[str, Any]) -> None:
    matrix = np.stack(list(vectors.values()))
    ids = _ids(len(matrix))
    g = Graph(None)
    g.upsert(ids, matrix)
    g.delete([ids[3]])
    with pytest.raises(ValueError, match="scrub"):
        g.save(tmp_path, "g", 7)
    assert g.holds_deleted() and g.scrub() and not g.holds_deleted()
    g.save(tmp_path, "g", 7)
    loaded = Graph.load(tmp_path, "g")
    assert loaded is not None
    h, generation = loaded
    assert generation == 7 and h.live == g.live == len(ids) - 1
    assert h.search(matrix, 5) == g.search(matrix, 5)
    # The deleted vector (stored normalised, float32) is in none of the saved files.
    # Looked for by value, not by bytes: hnswlib's float32 rounding of the
    # normalisation is not numpy's on every CPU (a last-bit difference).
    saved = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert _holds_vector(saved, matrix[4]) and not _holds_vector(saved, matrix[3])
    # A second save replaces the first one's files; removing leaves nothing.
    h.save(tmp_path, "g", 8)
    assert len(list(tmp_path.iterdir())) == 3 and Graph.load(tmp_path, "g")[1] == 8  # type: ignore[index]
    remove_saved(tmp_path, "g")
    assert list(tmp_path.iterdir()) == [] and Graph.load(tmp_path, "g") is None


def test_a_damaged_saved_graph_is_not_used(tmp_path: Path, vectors: dict[str, Any]) -> None:
    g = Graph(None)
    g.upsert(_ids(len(vectors)), np.stack(list(vectors.values())))
    g.save(tmp_path, "g", 1)
    manifest = json.loads((tmp_path / "g.json").read_text())
    (tmp_path / f"g-{manifest['token']}.ids.json").write_text("[not json")
    assert Graph.load(tmp_path, "g") is None


# -- the graphs of an embedded Chroma folder ----------------------------------------------


def test_the_graph_answers_as_chroma_after_every_kind_of_write(tmp_path: Path, vectors: dict[str, Any]) -> None:
    matrix = np.stack(list(vectors.values()))
    ids = _ids(len(matrix))
    index = _graph_index(tmp_path)
    try:
        index.upsert(NS, ids[:8], matrix[:8])
        assert not index.wait_for_graph(NS)  # nothing asked yet: no copy
        _same(index, matrix, 5)  # (Chroma answering: one query reads no graph, as a command asks once)
        assert not index.wait_for_graph(NS)
        _ready(index, matrix[0])
        _same(index, matrix, 5)
        index.upsert(NS, ids[8:], matrix[8:])  # new nodes
        _same(index, matrix, 6)
        moved = matrix[5] + matrix[9]
        index.upsert(NS, [ids[1]], (moved / np.linalg.norm(moved))[None, :])  # a node's vector changed
        _same(index, matrix, 6)
        index.delete(NS, ids[2:4])
        _same(index, matrix, len(ids))
        index.upsert(NS, [ids[2]], matrix[2:3])  # restored
        _same(index, matrix, 6)
        assert _counts(index) == (1, 0)
        assert index.wait_for_graph(NS)  # it followed every write: still the answering copy
    finally:
        index.close()


def test_a_closed_index_saves_its_graph_and_the_next_loads_it(tmp_path: Path, vectors: dict[str, Any]) -> None:
    matrix = np.stack(list(vectors.values()))
    ids = _ids(len(matrix))
    first = _graph_index(tmp_path)
    first.upsert(NS, ids, matrix)
    _ready(first, matrix[0])
    before = first.query(NS, matrix, 5)
    first.close()
    saved = tmp_path / "chroma" / GRAPH_FOLDER / f"{collection_name(NS)}.json"
    assert saved.is_file()

    second = _graph_index(tmp_path)
    try:
        _ready(second, matrix[0])
        assert _counts(second) == (0, 1)
        assert second.query(NS, matrix, 5) == before
    finally:
        second.close()
    third = _graph_index(tmp_path)
    try:
        third.delete(NS, [ids[0]])  # a delete removes the saved copy at once (it holds the vector)
        assert not saved.exists()
    finally:
        third.close()


def test_a_write_before_the_first_query_is_replayed_on_the_saved_graph(tmp_path: Path,
                                                                        vectors: dict[str, Any]) -> None:
    matrix = np.stack(list(vectors.values()))
    ids = _ids(len(matrix))
    _saved_without_last(tmp_path, matrix, ids)
    second = _graph_index(tmp_path)
    try:
        second.upsert(NS, ids[-1:], matrix[-1:])  # kept, to be replayed on the saved copy
        _ready(second, matrix[0])
        assert _counts(second) == (0, 1)
        assert second.query(NS, matrix[-1:], 1)[0][0][0] == ids[-1]
        _same(second, matrix, 5)
    finally:
        second.close()


def test_another_writer_makes_chroma_answer_until_a_new_copy_is_built(tmp_path: Path,
                                                                      vectors: dict[str, Any]) -> None:
    """Two indexes on one folder stand for two processes: each one's writes are
    unknown to the other's graph."""
    matrix = np.stack(list(vectors.values()))
    ids = _ids(len(matrix))
    mine, theirs = _graph_index(tmp_path), _graph_index(tmp_path)
    try:
        mine.upsert(NS, ids[:-1], matrix[:-1])
        _ready(mine, matrix[0])
        theirs.upsert(NS, ids[-1:], matrix[-1:])
        # The graph lacks the other writer's node: Chroma answers, and finds it.
        assert mine.query(NS, matrix[-1:], 1)[0][0][0] == ids[-1]
        assert mine.wait_for_graph(NS, timeout=60)  # a new copy, built with it
        assert _graphs(mine).builds == 2
        _same(mine, matrix, 5)
        theirs.delete(NS, ids[:1])
        assert ids[0] not in {i for i, _ in mine.query(NS, matrix[:1], len(ids))[0]}
    finally:
        mine.close()
        theirs.close()


def test_a_crash_after_a_save_never_lets_the_saved_graph_answer(tmp_path: Path, vectors: dict[str, Any]) -> None:
    matrix = np.stack(list(vectors.values()))
    ids = _ids(len(matrix))
    _saved_without_last(tmp_path, matrix, ids)
    crashed = _graph_index(tmp_path)
    crashed.upsert(NS, ids[-1:], matrix[-1:])  # ...and never closed: its copy is not saved
    _ready(crashed, matrix[0])
    abandon_graphs(crashed)  # (what a killed process leaves: nothing more is written)
    later = _graph_index(tmp_path)
    try:
        assert later.query(NS, matrix[-1:], 1)[0][0][0] == ids[-1]
        _ready(later, matrix[-1])
        assert _graphs(later).builds == 1  # built, not the stale saved one
        assert later.query(NS, matrix[-1:], 1)[0][0][0] == ids[-1]
    finally:
        later.close()
        crashed.close()


def test_a_dropped_namespace_leaves_no_graph_and_others_keep_theirs(tmp_path: Path, vectors: dict[str, Any]) -> None:
    matrix = np.stack(list(vectors.values()))
    ids = _ids(len(matrix))
    index = _graph_index(tmp_path)
    try:
        for ns in (NS, "other"):
            index.upsert(ns, ids, matrix)
            index.query(ns, matrix[:1], 1)
            index.query(ns, matrix[:1], 1)
            assert index.wait_for_graph(ns, timeout=60)
        index.drop(NS)
        assert index.query(NS, matrix[:1], 3) == [[]]
        assert index.query("other", matrix[:1], 1)[0][0][0] == ids[0]
        assert index.wait_for_graph("other")
        index.upsert(NS, ids[:2], matrix[:2])  # the namespace starts again
        assert [i for i, _ in index.query(NS, matrix[:1], 3)[0]] == ids[:2]
    finally:
        index.close()
    files = {p.name for p in (tmp_path / "chroma" / GRAPH_FOLDER).iterdir()}
    assert any(name.startswith(collection_name("other") + "-") for name in files)


def test_graphs_are_off_when_asked_and_for_a_server_url(tmp_path: Path) -> None:
    assert ChromaIndex(tmp_path / "chroma").graphs is None
    assert ChromaIndex(url="http://127.0.0.1:9").graphs is None
    assert not ChromaIndex(url="http://127.0.0.1:9").wait_for_graph(NS)


# -- retrieval ---------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_retrieval_answers_the_same_with_the_graph(open_memory: Any, tmp_path: Path, lang: str) -> None:
    """A memory answering from its graph and one asking Chroma (each its own
    folder, written alike) give the same answers while writes go on between
    queries; the graph followed every write, and the next handle loads it."""
    with_graph = open_memory(folder=tmp_path / "graph", dedup={"enabled": False})
    plain = open_memory(folder=tmp_path / "plain", dedup={"enabled": False},
                        accel={"in_memory_vectors": False})
    if lang == "zh":
        tasks = ["报销单 EXP-31：上海出差的酒店发票", "工单 TKT-90：打印机无法连接", "代码变更：上传超时重试"]
        notes = ["酒店发票金额是八百元", "打印机驱动已经重装", "重试间隔改为两秒", "财务要求补充出租车发票",
                 "出租车发票已经补交", "打印机在三楼"]
        queries = ["酒店发票金额是多少？", "打印机的问题解决了吗？", "上传重试的间隔是多少？", "财务要求补充什么？"]
    else:
        tasks = ["Expense claim EXP-31: hotel invoice for the Shanghai trip", "Ticket TKT-90: printer will not connect",
                 "Code change: retry uploads on timeout"]
        notes = ["The hotel invoice totals 800 yuan", "The printer driver was reinstalled",
                 "Retries now wait two seconds", "Finance asked for the taxi receipt too",
                 "The taxi receipt was handed in", "The printer is on floor 3"]
        queries = ["How much is the hotel invoice?", "Was the printer fixed?", "How long do upload retries wait?",
                   "What did finance ask for?"]

    def answer(mem: MemoryTree, q: str) -> list[tuple[str, str, float]]:
        return [(s.node.content, s.reason, round(s.score, 9)) for s in mem.retrieve(q, reinforce=False).nodes]

    heads = {id(m): [m.add(t, type="task", parent=ROOT) for t in tasks] for m in (with_graph, plain)}
    for i, note in enumerate(notes):
        for m in (with_graph, plain):
            node = m.add(note, type="fact", parent=heads[id(m)][i % len(tasks)])
            if i == 3:
                m.archive(node)
        for q in queries:
            assert answer(with_graph, q) == answer(plain, q)
        assert _index(with_graph).wait_for_graph(with_graph.namespace, timeout=60)
    assert _graphs(_index(with_graph)).builds == 1
    assert _index(plain).graphs is None
    with_graph.close()
    again = open_memory(folder=tmp_path / "graph", dedup={"enabled": False})
    again.retrieve(queries[0])
    assert not _index(again).wait_for_graph(again.namespace)  # a handle that asks once reads none
    again.retrieve(queries[0])
    assert _index(again).wait_for_graph(again.namespace, timeout=60)
    assert _counts(_index(again)) == (0, 1)
    for q in queries:
        assert answer(again, q) == answer(plain, q)


def test_deleting_most_of_a_namespace_drops_the_graph_for_a_compact_one(tmp_path: Path,
                                                                          vectors: dict[str, Any]) -> None:
    """A reindex deletes every vector and writes them again: the graph is dropped
    and built anew when next asked, not written over slot by slot."""
    base = np.stack(list(vectors.values()))
    noise = np.random.default_rng(0).normal(scale=0.05, size=(1500, base.shape[1])).astype(np.float32)
    matrix = base[np.arange(1500) % len(base)] + noise
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    ids = _ids(len(matrix))
    index = _graph_index(tmp_path)
    try:
        index.upsert(NS, ids, matrix)
        _ready(index, matrix[0])
        index.delete(NS, ids[:1200])
        assert not _graphs(index).ready(NS)
        index.upsert(NS, ids[:1200], matrix[:1200])
        _ready(index, matrix[0])
        assert _graphs(index).builds == 2
        _same(index, matrix[::50], 10)
    finally:
        index.close()


def test_too_many_writes_before_the_first_query_build_the_graph_afresh(
        tmp_path: Path, vectors: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes made before a handle's copy starts are kept to replay on the saved copy,
    up to a point; past it the saved copy is removed and a new one is built."""
    from hybrid_memory.accel import graph as graph_module

    monkeypatch.setattr(graph_module, "EARLY_MAX", 2)
    matrix = np.stack(list(vectors.values()))
    ids = _ids(len(matrix))
    _saved_without_last(tmp_path, matrix[:-3], ids[:-3])
    index = _graph_index(tmp_path)
    try:
        for i in range(len(ids) - 4, len(ids)):
            index.upsert(NS, ids[i : i + 1], matrix[i : i + 1])
        assert not (tmp_path / "chroma" / GRAPH_FOLDER / f"{collection_name(NS)}.json").exists()
        _ready(index, matrix[0])
        assert _counts(index) == (1, 0)
        _same(index, matrix, 5)
    finally:
        index.close()


def test_writes_reach_the_graph_off_the_write_path_and_before_a_save(tmp_path: Path,
                                                                      vectors: dict[str, Any]) -> None:
    """A write to a ready copy is counted at once and inserted by the graph's own
    thread; a search or a close that comes first applies it itself."""
    import time

    matrix = np.stack(list(vectors.values()))
    ids = _ids(len(matrix))
    index = _graph_index(tmp_path)
    index.upsert(NS, ids[:6], matrix[:6])
    _ready(index, matrix[0])
    graphs = _graphs(index)
    index.upsert(NS, ids[6:9], matrix[6:9])
    deadline = time.monotonic() + 30
    while graphs.pending(NS) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert graphs.ready(NS) and not graphs.pending(NS)  # the inserting thread applied it, unasked
    _same(index, matrix, 5)
    index.upsert(NS, ids[9:], matrix[9:])
    index.delete(NS, ids[:1])
    index.close()  # whatever is still pending goes into the saved copy
    again = _graph_index(tmp_path)
    try:
        _ready(again, matrix[0])
        assert _counts(again) == (0, 1)
        _same(again, matrix, len(ids))
        assert ids[0] not in {i for i, _ in again.query(NS, matrix[:1], len(ids))[0]}
    finally:
        again.close()



def _holds_vector(data: bytes, vector: np.ndarray[Any, Any]) -> bool:
    """Whether ``data`` holds ``vector``, normalised, as float32 values (at any
    alignment), each within a few units in the last place."""
    target = (vector / np.linalg.norm(vector)).astype(np.float32)
    for offset in range(4):
        usable = (len(data) - offset) // 4 * 4
        values = np.frombuffer(data[offset : offset + usable], dtype=np.float32)
        with np.errstate(invalid="ignore"):
            starts = np.flatnonzero(np.isclose(values, target[0], rtol=1e-5, atol=1e-7))
            for at in starts[starts + len(target) <= len(values)]:
                if np.allclose(values[at : at + len(target)], target, rtol=1e-5, atol=1e-7):
                    return True
    return False

"""parent=AUTO: a memory goes under the task branch it belongs to (hybrid_memory.placement),
found by retrieval's locate stage, in English and Chinese, with the real model on
SQLite and PostgreSQL; and under the active node when no branch is close enough."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from hybrid_memory import AUTO, ROOT, Config, MemoryTree
from hybrid_memory.errors import InvalidContentError, InvalidInputError, InvalidTypeError
from hybrid_memory.placement import decide

CASES = {
    "en": dict(
        trip="Trip to Berlin for the trade fair",
        trip_notes=["Booked the Hotel Adlon in Berlin for three nights", "The flight to Berlin leaves Frankfurt at 9:40"],
        budget="Quarterly budget review",
        budget_notes=["Marketing spend is twenty percent over the quarterly plan",
                      "Finance wants the revised budget numbers by Friday"],
        about_trip="The Hotel Adlon moved my Berlin booking to Thursday",
        about_budget="The revised marketing budget numbers went to finance",
    ),
    "zh": dict(
        trip="去柏林参加展会的出差",
        trip_notes=["在柏林预订了阿德隆酒店，住三晚", "去柏林的航班九点四十从法兰克福起飞"],
        budget="季度预算审核",
        budget_notes=["市场费用比季度预算计划超出百分之二十", "财务要求周五前交修改后的预算数字"],
        about_trip="阿德隆酒店把柏林的预订改到了周四",
        about_budget="修改后的市场预算数字已经交给财务",
    ),
}


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> dict[str, Any]:
    return CASES[request.param]


def two_tasks(mem: MemoryTree, case: dict[str, Any]) -> tuple[str, str]:
    """The trip and the budget, each with its notes; the budget is the active task."""
    trip = mem.add(case["trip"], type="task", parent=ROOT)
    for note in case["trip_notes"]:
        mem.add(note, type="event", parent=trip)
    budget = mem.add(case["budget"], type="task", parent=ROOT)
    for note in case["budget_notes"]:
        mem.add(note, type="fact", parent=budget)
    mem.focus(budget)
    return trip.id, budget.id


def test_a_memory_goes_to_the_branch_it_belongs_to_not_the_active_one(open_memory, case):
    mem = open_memory(write={"place_min": 0.2})
    trip, budget = two_tasks(mem, case)
    node = mem.add(case["about_trip"], type="event", parent=AUTO)
    assert node.parent_id == trip and node.branch_id == trip
    placed = node.placement
    assert placed is not None and placed.by == "branch" and placed.parent_id == trip
    assert placed.branch_id == trip and placed.runner_up_id == budget
    assert placed.score > placed.runner_up_score and placed.margin > 0
    assert placed.threshold == 0.2
    assert f"placed by branch under {trip}" in placed.explain()
    assert mem.get(node.id).parent_id == trip  # as stored
    assert mem.active.id == budget  # placing does not move the focus


def test_a_question_about_the_active_task_stays_there(open_memory, case):
    mem = open_memory(write={"place_min": 0.2})
    trip, budget = two_tasks(mem, case)
    node = mem.add(case["about_budget"], type="event", parent=AUTO)
    assert node.parent_id == budget and node.placement is not None and node.placement.by == "branch"
    assert node.placement.runner_up_id == trip


def test_no_branch_close_enough_goes_under_the_active_node(open_memory, case):
    mem = open_memory(write={"place_min": 2.0})
    trip, budget = two_tasks(mem, case)
    node = mem.add(case["about_trip"], type="event", parent=AUTO)
    assert node.parent_id == budget
    placed = node.placement
    assert placed is not None and placed.by == "active" and placed.parent_id == budget
    assert placed.branch_id == trip  # the best branch is still reported
    assert "placed by active" in placed.explain()


def test_an_empty_memory_places_at_the_top(open_memory):
    mem = open_memory()
    node = mem.add("A first note, with nothing stored yet", type="fact", parent=AUTO)
    assert node.parent_id is None and node.depth == 0
    assert node.placement is not None and node.placement.by == "active" and node.placement.branch_id is None
    assert "no branch holds a candidate" in node.placement.explain()


def test_place_decides_alike_and_writes_nothing(open_memory, case):
    mem = open_memory(write={"place_min": 0.2})
    trip, _ = two_tasks(mem, case)
    before = len(mem.nodes())
    placed = mem.place(case["about_trip"])
    assert len(mem.nodes()) == before
    assert placed.parent_id == trip and placed.by == "branch"
    node = mem.add(case["about_trip"], type="event", parent=AUTO)
    assert node.placement == placed


class Counting:
    """The real embedder, counting every text it is given."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.texts = inner, []
        self.name, self.dim = inner.name, inner.dim

    def embed(self, texts: Any) -> np.ndarray:
        self.texts += list(texts)
        return self.inner.embed(texts)

    def coverage(self, text: str) -> float:
        return float(self.inner.coverage(text))


def test_add_many_places_auto_items_and_embeds_each_content_once(open_memory, embedder, case):
    counting = Counting(embedder)
    mem = open_memory(embedder_=counting, write={"place_min": 0.2})
    trip, budget = two_tasks(mem, case)
    counting.texts.clear()
    nodes = mem.add_many([
        dict(content=case["about_trip"], type="event", parent=AUTO),
        dict(content=case["about_budget"], type="event", parent=budget),
        dict(key="new", content="A new task", type="task", parent=ROOT),
        dict(content="under the new task", type="fact", parent="new"),
    ])
    assert nodes[0].parent_id == trip and nodes[0].placement is not None
    assert nodes[1].parent_id == budget and nodes[1].placement is None
    assert nodes[3].parent_id == nodes[2].id
    assert counting.texts.count(case["about_trip"]) == 1
    # the stored vector reads the placed memory in its path, as any memory under the trip
    with mem.store.reading() as conn:
        stored = mem.store.nodes.embeddings(conn, [nodes[0].id])[nodes[0].id]
    alone = embedder.embed([case["about_trip"]])[0]
    assert not np.allclose(stored, alone)  # the path's embedding was added


def test_bad_input_is_refused_and_nothing_is_written(open_memory):
    mem = open_memory()
    mem.add("Something to place beside", type="task", parent=ROOT)
    before = len(mem.nodes())
    with pytest.raises(InvalidContentError):
        mem.place(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidContentError):
        mem.place("   ")
    with pytest.raises(InvalidTypeError):
        mem.add_many([dict(content="fine", type="fact", parent=AUTO), dict(content="x", type="fact", parent=3.5)])
    with pytest.raises(InvalidInputError):
        mem.add_many([dict(content="fine", type="fact", parent=AUTO), dict(content="x", type="nonsense")])
    assert len(mem.nodes()) == before


def test_decide_takes_the_best_branch_only_at_the_threshold():
    branches = [(0.6, "a", 3), (0.4, "b", 1)]
    assert decide(branches, "act", 0.6).parent_id == "a"
    below = decide(branches, "act", 0.61)
    assert (below.by, below.parent_id, below.branch_id, below.runner_up_id) == ("active", "act", "a", "b")
    assert decide([], None, 0.0).parent_id is None
    assert decide([(0.5, "a", 1)], None, 0.1).runner_up_id is None


# -- the command line, HTTP and MCP ----------------------------------------------------


def test_the_command_line_places_with_parent_auto_and_says_where(tmp_path, capsys, case):
    from hybrid_memory.cli import main

    folder = tmp_path / "mem"
    with MemoryTree.open(folder, namespace="cli", config=Config.load(overrides={"embedding": {"model": "bundled"}})) as mem:
        trip, budget = two_tasks(mem, case)
    args = ["--path", str(folder), "--namespace", "cli", "--model", "bundled"]
    assert main([*args, "--json", "place", case["about_trip"]]) == 0
    placed = json.loads(capsys.readouterr().out)
    assert placed["branch_id"] == trip and placed["runner_up_id"] == budget
    assert main([*args, "add", case["about_trip"], "-t", "event", "--parent", "auto"]) == 0
    out = capsys.readouterr().out
    assert f"best branch {trip}" in out and "placed by" in out
    with MemoryTree.open(folder, namespace="cli", config=Config.load(overrides={"embedding": {"model": "bundled"}})) as mem:
        added = [n for n in mem.nodes() if n.content == case["about_trip"]]
        assert len(added) == 1 and added[0].parent_id == placed["parent_id"]


def test_http_and_mcp_take_parent_auto(tmp_path, embedder, case):
    pytest.importorskip("fastapi")
    pytest.importorskip("mcp")
    from fastapi.testclient import TestClient

    from hybrid_memory.mcp_server import build_server
    from hybrid_memory.server.app import create_app
    from hybrid_memory.server.keys import KeyFile

    keys = KeyFile(tmp_path / "keys.json")
    token = keys.add("web", "write")
    with MemoryTree.open(tmp_path / "mem", namespace="web", embedder=embedder) as mem:
        trip, budget = two_tasks(mem, case)
    app = create_app(keys=KeyFile(tmp_path / "keys.json"), path=tmp_path / "mem", embedder=embedder)
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
        placed = client.post("/v1/web/place", json={"content": case["about_trip"]})
        assert placed.status_code == 200 and placed.json()["branch_id"] == trip
        added = client.post("/v1/web/nodes", json={"content": case["about_trip"], "type": "event", "parent": "auto"})
        assert added.status_code == 201
        body = added.json()
        assert body["placement"]["branch_id"] == trip and body["parent_id"] == body["placement"]["parent_id"]
        batch = client.post("/v1/web/nodes/batch", json={"items": [
            {"content": case["about_budget"], "type": "fact", "parent": "auto"}]})
        assert batch.status_code == 201 and batch.json()[0]["placement"]["branch_id"] == budget
        explicit = client.post("/v1/web/nodes", json={"content": "plain", "type": "fact", "parent": budget})
        assert explicit.json()["placement"] is None

    import anyio
    from mcp import Client

    with MemoryTree.open(tmp_path / "mem", namespace="web", embedder=embedder) as mem:
        content = case["trip_notes"][1] + "!"
        expected = mem.place(content)

        async def run() -> None:
            async with Client(build_server(mem)) as client:
                result = await client.call_tool("remember", {"content": content, "type": "event", "parent": "auto"})
                assert not result.is_error, result.content
                node = result.structured_content
                assert node is not None and node["placement"] == expected.explain()
                assert node["parent_id"] == expected.parent_id

        anyio.run(run)

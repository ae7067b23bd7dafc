"""summarize() and finish() on the three front ends: the command line, HTTP and MCP, in
English and Chinese, on a real SQLite folder with its embedded Chroma index and the
real bundled model. Only the default (extractive) summarizer is reachable from them;
each takes an optional token budget. A refused call answers with the library's error
(its exit code, HTTP status or MCP tool error) and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hybrid_memory import ROOT, Config, MemoryTree
from hybrid_memory.errors import InvalidInputError, NotFoundError
from hybrid_memory.summaries import (
    COVERS,
    FINISHED_AT,
    SUMMARIZER,
    SUMMARY_ID,
    SUMMARY_OF,
    sentences,
)
from hybrid_memory.text import count_tokens

CASES = {
    "en": dict(
        task="Plan the Kyoto trip in April",
        notes=[("Flights booked on ANA, arriving April 3 at Kansai airport.", "event"),
               ("The hotel near Gion is confirmed for four nights. Breakfast is included.", "fact"),
               ("The user prefers window seats on long flights.", "preference")],
        other="Write the quarterly sales report",
    ),
    "zh": dict(
        task="准备四月的京都旅行",
        notes=[("机票已经订好，四月三日到达关西机场。", "event"),
               ("祇园附近的酒店确认住四晚。含早餐。", "fact"),
               ("用户坐长途航班喜欢靠窗的座位。", "preference")],
        other="写季度销售报告",
    ),
}
UNKNOWN = "0123456789abcdef"  # shaped like a node id; no node has it
BUNDLED = {"embedding": {"model": "bundled"}}


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> dict[str, Any]:
    return CASES[request.param]


def trip(mem: MemoryTree, case: dict[str, Any]) -> tuple[str, list[str], str]:
    """The trip task with its notes, and an empty other task (the active one)."""
    task = mem.add(case["task"], type="task", parent=ROOT)
    notes = [mem.add(content, type=kind, parent=task).id for content, kind in case["notes"]]
    other = mem.add(case["other"], type="task", parent=ROOT)
    return task.id, notes, other.id


def rows(mem: MemoryTree) -> list[tuple[Any, ...]]:
    """Every node as a refused call must leave it."""
    return [(n.id, n.status, n.version, dict(n.meta)) for n in mem.nodes(include_archived=True)]


def check_summary(summary: dict[str, Any], task: str, notes: list[str], case: dict[str, Any]) -> None:
    assert summary["type"] == "summary" and summary["parent_id"] == task
    assert summary["meta"][SUMMARY_OF] == task and summary["meta"][COVERS] == notes
    assert summary["meta"][SUMMARIZER] == "extractive"
    kept = sentences(summary["content"])  # the extractive summary: sentences of the notes, as they were
    assert kept and all(any(s in content for content, _ in case["notes"]) for s in kept)


# -- the command line ----------------------------------------------------------------------


def test_the_command_line_summarizes_and_finishes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  case: dict[str, Any]) -> None:
    from hybrid_memory.cli import main

    folder = tmp_path / "mem"
    with MemoryTree.open(folder, namespace="cli", config=Config.load(overrides=BUNDLED)) as mem:
        task, notes, other = trip(mem, case)
    args = ["--path", str(folder), "--namespace", "cli", "--model", "bundled"]

    assert main([*args, "--json", "summarize", task, "--budget-tokens", "20"]) == 0
    first = json.loads(capsys.readouterr().out)
    check_summary(first, task, notes, case)
    assert count_tokens(first["content"]) <= 20

    assert main([*args, "finish", task[-8:]]) == 0  # a short id, as tree prints it
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"finished {task}"
    assert out[1].startswith("added ") and out[1].endswith(f"[summary] under {task}, covering {len(notes)} memories")
    second = out[1].split()[1]

    with MemoryTree.open(folder, namespace="cli", config=Config.load(overrides=BUNDLED)) as mem:
        head = mem.get(task)
        assert head.meta[FINISHED_AT] is not None and head.meta[SUMMARY_ID] == second
        assert mem.get(second).content == out[2]
        assert second != first["id"] and not mem.get(first["id"]).live  # replaced, archived
        before = rows(mem)

    capsys.readouterr()
    assert main([*args, "summarize", UNKNOWN]) == NotFoundError.exit_code
    assert "error [not_found]" in capsys.readouterr().err
    assert main([*args, "finish", notes[0]]) == InvalidInputError.exit_code  # not a task
    assert "error [invalid_input]" in capsys.readouterr().err
    assert main([*args, "finish", other]) == InvalidInputError.exit_code  # nothing under it
    assert "error [invalid_input]" in capsys.readouterr().err
    assert main([*args, "finish", task, "--budget-tokens", "0"]) == InvalidInputError.exit_code
    assert "error [invalid_input]" in capsys.readouterr().err
    with MemoryTree.open(folder, namespace="cli", config=Config.load(overrides=BUNDLED)) as mem:
        assert rows(mem) == before


# -- HTTP --------------------------------------------------------------------------------------


def test_http_summarizes_and_finishes(tmp_path: Path, embedder: Any, case: dict[str, Any]) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from hybrid_memory.server.app import create_app
    from hybrid_memory.server.keys import KeyFile

    keys = KeyFile(tmp_path / "keys.json")
    writer, reader = keys.add("web", "write"), keys.add("web", "read")
    with MemoryTree.open(tmp_path / "mem", namespace="web", embedder=embedder) as mem:
        task, notes, other = trip(mem, case)
    app = create_app(keys=KeyFile(tmp_path / "keys.json"), path=tmp_path / "mem", embedder=embedder)
    with TestClient(app, headers={"Authorization": f"Bearer {writer}"}) as c:
        paths = c.get("/openapi.json").json()["paths"]
        assert {"/v1/{namespace}/nodes/{node_id}/summarize", "/v1/{namespace}/nodes/{node_id}/finish"} <= set(paths)

        first = c.post(f"/v1/web/nodes/{task}/summarize")  # no body: the configured budget
        assert first.status_code == 201, first.text
        check_summary(first.json(), task, notes, case)

        done = c.post(f"/v1/web/nodes/{task}/finish", json={"budget_tokens": 20})
        assert done.status_code == 201, done.text
        summary = done.json()
        check_summary(summary, task, notes, case)
        assert count_tokens(summary["content"]) <= 20 < count_tokens(first.json()["content"])
        head = c.get(f"/v1/web/nodes/{task}").json()
        assert head["meta"][FINISHED_AT] is not None and head["meta"][SUMMARY_ID] == summary["id"]
        assert c.get(f"/v1/web/nodes/{first.json()['id']}").json()["status"] == "archived"

        def error(r: Any) -> tuple[int, str]:
            return r.status_code, r.json()["error"]

        def stored() -> list[tuple[Any, ...]]:
            nodes = c.get("/v1/web/tree", params={"archived": True}).json()["nodes"]
            return [(n["id"], n["status"], n["version"], n["meta"]) for n in nodes]

        before = stored()
        assert len(before) == len(notes) + 4  # two tasks, the notes, two summaries (one archived)
        assert error(c.post(f"/v1/web/nodes/{UNKNOWN}/summarize")) == (404, "not_found")
        assert error(c.post(f"/v1/web/nodes/{UNKNOWN}/finish", json={})) == (404, "not_found")
        assert error(c.post(f"/v1/web/nodes/{notes[0]}/finish")) == (400, "invalid_input")  # not a task
        assert error(c.post(f"/v1/web/nodes/{other}/summarize")) == (400, "invalid_input")  # nothing under it
        assert error(c.post(f"/v1/web/nodes/{task}/finish", json={"budget_tokens": 0})) == (400, "invalid_input")
        assert error(c.post(f"/v1/web/nodes/{task}/summarize", json={"budget_tokens": "many"})) == (
            422, "invalid_request")
        assert error(c.post(f"/v1/web/nodes/{task}/summarize", json={"budget": 10})) == (422, "invalid_request")
        assert error(c.post(f"/v1/web/nodes/{task}/finish", headers={"Authorization": f"Bearer {reader}"})) == (
            403, "access_denied")
        assert stored() == before


# -- MCP ---------------------------------------------------------------------------------------


def test_mcp_summarizes_and_finishes(tmp_path: Path, embedder: Any, case: dict[str, Any]) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client

    from hybrid_memory.mcp_server import build_server

    folder = tmp_path / "mem"
    with MemoryTree.open(folder, namespace="agent", embedder=embedder) as mem:
        task, notes, other = trip(mem, case)

        async def run() -> None:
            async with Client(build_server(mem)) as client:
                tools = {t.name: t for t in (await client.list_tools()).tools}
                assert tools["summarize"].input_schema["required"] == ["node_id"]
                assert tools["finish"].input_schema["required"] == ["task_id"]

                first = await client.call_tool("summarize", {"node_id": task, "budget_tokens": 20})
                assert not first.is_error, first.content
                node = first.structured_content
                assert node is not None and node["type"] == "summary" and node["parent_id"] == task
                assert json.loads(first.content[0].text) == node  # type: ignore[union-attr]

                done = await client.call_tool("finish", {"task_id": task})
                assert not done.is_error, done.content
                summary = done.structured_content
                assert summary is not None and summary["type"] == "summary" and summary["parent_id"] == task
                head = mem.get(task)
                assert head.meta[FINISHED_AT] is not None and head.meta[SUMMARY_ID] == summary["id"]
                assert mem.get(summary["id"]).meta[COVERS] == notes
                assert summary["content"] == mem.get(summary["id"]).content
                assert summary["id"] != node["id"] and not mem.get(node["id"]).live  # replaced, archived

                before = rows(mem)
                refused: list[tuple[str, dict[str, Any], str]] = [
                    ("summarize", {"node_id": UNKNOWN}, NotFoundError.code),
                    ("finish", {"task_id": UNKNOWN}, NotFoundError.code),
                    ("finish", {"task_id": notes[0]}, InvalidInputError.code),  # not a task
                    ("summarize", {"node_id": other}, InvalidInputError.code),  # nothing under it
                    ("finish", {"task_id": task, "budget_tokens": 0}, InvalidInputError.code),
                ]
                for tool, arguments, code in refused:
                    result = await client.call_tool(tool, arguments)
                    assert result.is_error and result.structured_content is not None, (tool, arguments)
                    assert result.structured_content["error"]["code"] == code, (tool, arguments)
                assert rows(mem) == before

        anyio.run(run)

    with MemoryTree.open(folder, namespace="agent", embedder=embedder, role="read") as reader:

        async def offered() -> set[str]:
            async with Client(build_server(reader)) as client:
                return {t.name for t in (await client.list_tools()).tools}

        assert not {"summarize", "finish"} & anyio.run(offered)

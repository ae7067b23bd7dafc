"""The MCP server (hybrid_memory.mcp_server) through real MCP client sessions: in
process (the SDK's Client on the server object, over JSON-RPC memory streams and over
the direct dispatch of the newest protocol) against a real memory, and over stdio
against ``python -m hybrid_memory.mcp_server`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
from conftest import OpenMemory, Stores  # noqa: E402
from mcp import Client, StdioServerParameters, stdio_client  # noqa: E402

from hybrid_memory import (  # noqa: E402
    ROOT,
    ClosedError,
    InvalidContentError,
    InvalidInputError,
    InvalidTypeError,
    InvalidWeightError,
    MemoryTree,
    NamespaceError,
    NodeType,
    NotFoundError,
    SentenceTransformerEmbedder,
    Status,
)
from hybrid_memory.mcp_server import build_server, main  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ALL_TOOLS = {"remember", "recall", "focus", "feedback", "forget", "checkpoint", "recover", "stats", "summarize", "finish", "ingest"}
READ_TOOLS = {"recall", "recover", "stats"}
UNKNOWN = "0123456789abcdef"  # shaped like a node id; no node has it

Session = Callable[[Client], Awaitable[None]]

#: The servers run with the tests' model (all-MiniLM-L6-v2), which the checks open the memory with.
MODEL = ["--model", "bundled"]


def in_session(mem: MemoryTree, body: Session, *, mode: str = "legacy") -> None:
    """Run ``body`` with a client connected in process to a server over ``mem``.
    ``legacy``: the initialize handshake and JSON-RPC over memory streams (what most
    clients speak); ``auto``: the SDK's direct dispatch at the newest protocol."""

    async def run() -> None:
        async with Client(build_server(mem), mode=mode) as client:
            await body(client)

    anyio.run(run)


async def call(client: Client, tool: str, **args: Any) -> Any:
    """A successful call's structured result (the text block holds the same JSON)."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    text = result.content[0]
    assert text.type == "text" and json.loads(text.text) == result.structured_content
    return result.structured_content


async def fails(client: Client, tool: str, **args: Any) -> dict[str, str]:
    """A call the library refused: an MCP tool error carrying the error's code and message."""
    result = await client.call_tool(tool, args)
    assert result.is_error, result.structured_content
    assert result.structured_content is not None
    error: dict[str, str] = result.structured_content["error"]
    text = result.content[0]
    assert text.type == "text" and text.text == f"error [{error['code']}]: {error['message']}"
    return error


def state(mem: MemoryTree) -> tuple[Any, ...]:
    """Everything a refused call must leave as it was."""
    nodes = [(n.id, n.parent_id, n.content, n.version, n.status, n.importance, n.confidence, n.pinned)
             for n in mem.nodes(include_archived=True)]
    active = mem.active
    return mem.admin.stats().log_seq, nodes, None if active is None else active.id


def seed(mem: MemoryTree) -> dict[str, str]:
    """Two English tasks and one Chinese one, the Chinese task active."""
    claim = mem.add("Expense claim for Zhang San (R&D)", type="task", parent=ROOT)
    returned = mem.add("Finance returned the claim: the invoice is unreadable", type="event", parent=claim)
    sms = mem.add("Zhang San wants results by SMS", type="preference", parent=claim)
    waiting = mem.add("Waiting for a readable copy of the invoice", type="state", parent=claim)
    migration = mem.add("Migrate the order database to the new data centre", type="task", parent=ROOT)
    window = mem.add("Migration window: Saturday 02:00", type="decision", parent=migration)
    zh = mem.add("李四的差旅报销", type="task", parent=ROOT)
    zh_event = mem.add("财务说酒店发票抬头写错了，需要重开", type="event", parent=zh)
    return dict(claim=claim.id, returned=returned.id, sms=sms.id, waiting=waiting.id,
                migration=migration.id, window=window.id, zh=zh.id, zh_event=zh_event.id)


# -- in process ----------------------------------------------------------------------------


def test_every_tool_is_listed_with_a_description_and_schemas(open_memory: OpenMemory) -> None:
    mem = open_memory()

    async def body(client: Client) -> None:
        assert client.instructions and "recall" in client.instructions
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == ALL_TOOLS
        for t in tools.values():
            assert t.description and len(t.description.split()) >= 15, t.name
            assert t.input_schema["type"] == "object"
            assert t.output_schema is not None and t.output_schema["type"] == "object", t.name
            assert t.annotations is not None
            assert t.annotations.read_only_hint is (t.name in READ_TOOLS), t.name
            for name, prop in t.input_schema.get("properties", {}).items():
                assert prop.get("description"), f"{t.name}({name}) has no description"
        remember = tools["remember"].input_schema
        assert remember["required"] == ["content"]
        assert remember["properties"]["type"]["enum"] == [t.value for t in NodeType]
        assert remember["properties"]["type"]["default"] == "event"
        assert remember["properties"]["importance"]["maximum"] == 1
        recall = tools["recall"].input_schema
        assert set(recall["properties"]) == {"query", "k", "budget_tokens", "explain"}
        assert recall["properties"]["k"]["minimum"] == 1 and "required" not in recall
        assert tools["focus"].input_schema["required"] == ["node_id"]
        assert tools["forget"].input_schema["properties"]["dry_run"]["default"] is True
        assert tools["forget"].annotations is not None and tools["forget"].annotations.destructive_hint
        assert "node_id" in tools["feedback"].input_schema["required"]

    in_session(mem, body)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_remember_then_recall_in_english_and_chinese(open_memory: OpenMemory, mode: str) -> None:
    mem = open_memory()

    async def body(client: Client) -> None:
        task = await call(client, "remember", content="Expense claim for Zhang San (R&D)", type="task", root=True)
        assert task["type"] == "task" and task["parent_id"] is None and task["merged"] is False
        assert mem.active is not None and mem.active.id == task["id"]  # a new task becomes active
        event = await call(client, "remember", content="Finance returned the claim: the invoice is unreadable")
        assert event["type"] == "event" and event["parent_id"] == task["id"]  # under the active node
        pref = await call(client, "remember", content="Zhang San wants results by SMS", type="preference",
                          parent=task["id"], importance=0.9, pinned=True)
        assert pref["importance"] == 0.9 and pref["pinned"] is True
        twin = await call(client, "remember", content="Finance returned the claim: the invoice is unreadable")
        assert twin["merged"] is True and twin["id"] == event["id"]
        other = await call(client, "remember", content="Migrate the order database to the new data centre",
                           type="task", root=True)
        await call(client, "remember", content="Migration window: Saturday 02:00", type="decision")
        zh = await call(client, "remember", content="李四的差旅报销", type="task", root=True)
        zh_event = await call(client, "remember", content="财务说酒店发票抬头写错了，需要重开")
        assert zh_event["content"] == "财务说酒店发票抬头写错了，需要重开" and zh_event["parent_id"] == zh["id"]
        assert {n.id for n in mem.nodes()} == {task["id"], event["id"], pref["id"], other["id"], zh["id"],
                                               zh_event["id"], mem.children(other["id"])[0].id}

        for query, wanted in [("why was the claim sent back?", event["id"]),
                              ("酒店发票有什么问题？", zh_event["id"])]:
            expected = mem.retrieve(query, reinforce=False)  # the library's answer, the state unchanged
            got = await call(client, "recall", query=query)
            assert [n["id"] for n in got["nodes"]] == expected.ids
            assert got["context"] == expected.context and got["tokens"] == expected.tokens
            hit = {n["id"]: n for n in got["nodes"] if n["reason"] == "hit"}
            assert wanted in hit
            assert set(hit[wanted]) == {"id", "type", "parent_id", "reason", "score", "preview"}
            assert got["nodes"][[n["id"] for n in got["nodes"]].index(wanted)]["preview"] in got["context"]
            assert "branches" not in got

        explained = await call(client, "recall", query="why was the claim sent back?", k=2, budget_tokens=200,
                               explain=True)
        assert explained["budget_tokens"] == 200 and explained["tokens"] <= 200
        assert sum(n["reason"] == "hit" for n in explained["nodes"]) <= 2
        assert explained["branches"] and explained["branches"][0]["id"] == task["id"]
        for n in explained["nodes"]:
            assert {"similarity", "dense", "lexical", "weight", "branch_score", "branch_factor", "superseded_factor",
                    "tokens"} <= set(n)

        # Without a query: the active (Chinese) task's context.
        active = await call(client, "recall")
        assert active["query"] is None and "李四的差旅报销" in active["context"]
        assert [n["id"] for n in active["nodes"]][:1] == [zh["id"]]

    in_session(mem, body, mode=mode)


def test_focus_feedback_checkpoint_recover_stats_forget(open_memory: OpenMemory) -> None:
    mem = open_memory()
    ids = seed(mem)
    step = mem.config.feedback.important_step

    async def body(client: Client) -> None:
        first = await call(client, "recover")
        assert first["active"]["id"] == ids["zh"] and first["state"] is None
        assert first["last_checkpoint"]["active_id"] == ids["zh"]  # every focus change is checkpointed
        assert first["live_nodes"] == 8 and first["problems"] == []

        focused = await call(client, "focus", node_id=ids["returned"])
        assert focused["id"] == ids["returned"] and focused["content"].startswith("Finance returned")
        assert mem.active is not None and mem.active.id == ids["returned"]

        before = mem.get(ids["returned"])
        fb = await call(client, "feedback", node_id=ids["returned"], important=True)
        after = mem.get(ids["returned"])
        assert fb["importance"] == after.importance == pytest.approx(min(1.0, before.importance + step))
        fb = await call(client, "feedback", node_id=ids["sms"], confirmed=True, importance=0.95)
        assert fb["importance"] == 0.95 and fb["confidence"] == mem.get(ids["sms"]).confidence > 0.7

        cp = await call(client, "checkpoint", note="asked for a new invoice")
        last = mem.recover().last_checkpoint
        assert last is not None and (cp["id"], cp["note"], cp["active_id"], cp["log_seq"]) == (
            last.id, "asked for a new invoice", ids["returned"], last.log_seq)

        rec = await call(client, "recover")
        lib = mem.recover()
        assert rec["active"]["id"] == ids["returned"]
        assert [p["id"] for p in rec["path"]] == [n.id for n in lib.path] == [ids["claim"], ids["returned"]]
        assert rec["state"]["id"] == ids["waiting"]  # the latest state of the active branch
        assert rec["last_checkpoint"]["note"] == "asked for a new invoice"

        stats = await call(client, "stats")
        s = mem.admin.stats()
        assert stats == dict(namespace=s.namespace, live=s.live, archived=s.archived, depth=s.depth,
                             by_type=dict(s.by_type), active_path=list(s.active_path),
                             last_checkpoint_at=s.last_checkpoint_at, disk_bytes=s.disk_bytes, log_seq=s.log_seq)
        assert stats["live"] == 8 and stats["active_path"] == [ids["claim"], ids["returned"]]

        # forget reports by default; the plan is the library's; dry_run=false archives it.
        plan = mem.forget(max_nodes=4, dry_run=True)
        dry = await call(client, "forget", max_nodes=4)
        assert dry["dry_run"] is True and dry["live_after"] == dry["live_before"] == 8
        assert [f["id"] for f in dry["forgotten"]] == [i for i, _ in plan.details] != []
        assert mem.admin.stats().live == 8
        done = await call(client, "forget", max_nodes=4, dry_run=False)
        assert done["dry_run"] is False and done["forgotten"] == dry["forgotten"]
        gone = {f["id"] for f in done["forgotten"]}
        assert all(mem.get(i).status is Status.ARCHIVED for i in gone)
        assert not gone & {ids["claim"], ids["returned"]}  # never the active path
        assert done["live_after"] == mem.admin.stats().live == 8 - len(gone)
        assert (await call(client, "stats"))["archived"] == len(gone)

    in_session(mem, body)


def test_refused_calls_come_back_as_tool_errors_and_change_nothing(open_memory: OpenMemory, tmp_path: Path) -> None:
    mem = open_memory()
    ids = seed(mem)
    other = open_memory(namespace="other", folder=tmp_path / "mem")
    foreign = other.add("another tenant's memory", type="fact")

    async def body(client: Client) -> None:
        await call(client, "recall", query="invoice")  # buffered reads must survive the refusals too
        before = state(mem)
        refusals: list[tuple[str, dict[str, Any], str]] = [
            ("focus", dict(node_id=UNKNOWN), NotFoundError.code),
            ("focus", dict(node_id=foreign.id), NamespaceError.code),
            ("feedback", dict(node_id=UNKNOWN, important=True), NotFoundError.code),
            ("feedback", dict(node_id=ids["sms"]), InvalidInputError.code),  # nothing to say
            ("feedback", dict(node_id=ids["sms"], importance=1.5), InvalidWeightError.code),
            ("remember", dict(content=""), InvalidContentError.code),
            ("remember", dict(content="   \n"), InvalidContentError.code),
            ("remember", dict(content="x" * (mem.config.write.max_content_chars + 1)), InvalidContentError.code),
            ("remember", dict(content="ok", type="bogus"), InvalidTypeError.code),
            ("remember", dict(content="ok", parent=UNKNOWN), NotFoundError.code),
            ("remember", dict(content="ok", parent=ids["claim"], root=True), InvalidInputError.code),
            ("remember", dict(content="ok", importance=-0.1), InvalidWeightError.code),
            ("recall", dict(query="invoice", k=-1), InvalidInputError.code),
            ("recall", dict(query="invoice", k=0), InvalidInputError.code),
            ("recall", dict(query="invoice", budget_tokens=0), InvalidInputError.code),
            ("recall", dict(query="  "), InvalidInputError.code),
            ("forget", dict(threshold=2.0, dry_run=False), InvalidWeightError.code),
            ("forget", dict(max_nodes=-1, dry_run=False), InvalidInputError.code),
            ("checkpoint", dict(note="a\x00b"), InvalidContentError.code),
        ]
        for tool, args, code in refusals:
            error = await fails(client, tool, **args)
            assert error["code"] == code, (tool, args, error)
            assert error["message"]
            assert state(mem) == before, (tool, args)

        # Arguments of the wrong JSON type are refused by the SDK's validation, also as a tool error.
        result = await client.call_tool("remember", {"content": 5})
        assert result.is_error and state(mem) == before
        result = await client.call_tool("no_such_tool", {})
        assert result.is_error and state(mem) == before

        # The server is still serving, and the memory still writes.
        assert (await call(client, "stats"))["live"] == 8
        assert (await call(client, "remember", content="a readable copy arrived", parent=ids["claim"]))["id"]

        mem.close()
        assert (await fails(client, "stats"))["code"] == ClosedError.code

    in_session(mem, body)


def test_a_read_handle_offers_only_the_read_tools(open_memory: OpenMemory, stores: Stores,
                                                  embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    writer = open_memory()
    ids = seed(writer)
    writer.close()
    reader = stores.open(tmp_path / "mem", namespace="t", role="read", embedder=embedder)
    try:
        async def body(client: Client) -> None:
            assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS
            got = await call(client, "recall", query="why was the claim sent back?")
            assert ids["returned"] in [n["id"] for n in got["nodes"]]
            assert (await call(client, "stats"))["disk_bytes"] is None  # the store's size is an operator's figure
            assert (await call(client, "recover"))["active"]["id"] == ids["zh"]
            refused = await client.call_tool("remember", {"content": "not allowed"})
            assert refused.is_error

        in_session(reader, body)
        assert reader.admin.stats().live == 8
    finally:
        reader.close()


# -- over stdio ------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["module", "cli"])
def test_stdio_server_in_a_subprocess(tmp_path: Path, embedder: SentenceTransformerEmbedder, entry: str) -> None:
    """The server as its own process, started as ``python -m hybrid_memory.mcp_server``
    or as the command line's ``hybrid-memory mcp``."""
    folder = tmp_path / "memory"
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "ANONYMIZED_TELEMETRY": "False",
        "HYBRID_MEMORY_CACHE": os.environ["HYBRID_MEMORY_CACHE"],  # conftest's: the session's ONNX export
    }
    server = StdioServerParameters(
        command=sys.executable,
        args=(["-m", "hybrid_memory.mcp_server", "--path", str(folder), "--namespace", "agent-7", *MODEL]
              if entry == "module" else ["-m", "hybrid_memory", "--path", str(folder), "--namespace", "agent-7",
                                         *MODEL, "mcp"]),
        env=env, cwd=str(REPO),
    )
    written: dict[str, str] = {}

    async def run() -> None:
        # The server's stderr (its logs) goes to a file of the test, to read when it fails.
        with (tmp_path / "server.log").open("w") as errlog, anyio.fail_after(600):
            async with Client(stdio_client(server, errlog=errlog), mode="legacy") as client:
                assert {t.name for t in (await client.list_tools()).tools} == ALL_TOOLS
                task = await call(client, "remember", content="报销单：张三的研发费用", type="task", root=True)
                event = await call(client, "remember", content="Finance returned the claim: the invoice is unreadable")
                got = await call(client, "recall", query="why was the claim returned?")
                assert event["id"] in [n["id"] for n in got["nodes"] if n["reason"] == "hit"]
                assert "报销单：张三的研发费用" in got["context"]
                assert (await fails(client, "focus", node_id=UNKNOWN))["code"] == NotFoundError.code
                assert (await call(client, "stats"))["disk_bytes"] is None  # the default role is write
                written.update(task=task["id"], event=event["id"])

    try:
        anyio.run(run)
    except BaseException:
        print((tmp_path / "server.log").read_text())  # shown with the failure
        raise

    with MemoryTree.open(folder, namespace="agent-7", embedder=embedder) as mem:
        assert {n.id: n.content for n in mem.nodes()} == {
            written["task"]: "报销单：张三的研发费用",
            written["event"]: "Finance returned the claim: the invoice is unreadable",
        }
        assert mem.active is not None and mem.active.id == written["task"]
        assert mem.admin.verify().clean  # the server closed the memory: its index writes went in
        assert written["event"] in mem.retrieve("why was the claim returned?").ids


def test_main_reports_a_bad_open_with_the_error_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--path", str(tmp_path / "m"), "--namespace", " "]) == InvalidInputError.exit_code
    assert "error [invalid_input]" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_importing_the_package_does_not_import_mcp() -> None:
    code = "import sys, hybrid_memory, hybrid_memory.cli; sys.exit(1 if 'mcp' in sys.modules else 0)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

"""Ingesting transcripts (hybrid_memory.ingest): every format, in English and Chinese,
with the real model on SQLite and PostgreSQL; original times and speakers kept; a
second ingest writes nothing twice; a malformed file is refused by line and writes
nothing; a crash in the middle of an ingest is finished by ingesting again."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hybrid_memory import AUTO, ROOT, IngestError, MemoryTree
from hybrid_memory.ingest import ASSISTANT_IMPORTANCE, SOURCE, SOURCE_ID, SPEAKER, read, times
from hybrid_memory.model import NodeType

CHATS = {
    "en": [
        {"role": "user", "content": "I moved to Lisbon last spring.", "timestamp": "2024-03-01T10:00:00Z"},
        {"role": "assistant", "content": "How do you like it so far?", "timestamp": "2024-03-01T10:00:05Z"},
        {"role": "user", "content": [{"type": "text", "text": "I love it, but the rent is high."}],
         "timestamp": 1709287300},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "x"}], "timestamp": 1709287301},
    ],
    "zh": [
        {"role": "user", "content": "我去年春天搬到了里斯本。", "timestamp": "2024-03-01T10:00:00Z"},
        {"role": "assistant", "content": "住得还习惯吗？", "timestamp": "2024-03-01T10:00:05Z"},
        {"role": "user", "content": [{"type": "text", "text": "很喜欢，就是房租太贵了。"}], "timestamp": 1709287300},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "x"}], "timestamp": 1709287301},
    ],
}
QUESTION = {"en": "Where does the user live now?", "zh": "用户现在住在哪里？"}


@pytest.fixture(params=sorted(CHATS))
def lang(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return path


def contents(mem: MemoryTree) -> list[tuple[str, str, float]]:
    return sorted((n.type.value, n.content, n.created_at) for n in mem.nodes(include_archived=True))


# -- reading ----------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    (1709287300, 1709287300.0), (1709287300123, 1709287300.123), ("1709287300", 1709287300.0),
    ("2024-03-01T10:00:00Z", 1709287200.0), ("2024-03-01 10:00", 1709287200.0), ("2024-03-01", 1709251200.0),
    ("1:56 pm on 8 May, 2023", 1683554160.0), ("2023/05/20 (Sat) 02:21", 1684549260.0),
])
def test_times_read_every_form_as_utc(value: object, expected: float) -> None:
    assert times.parse(value) == pytest.approx(expected)


@pytest.mark.parametrize("value", ["yesterday", "2023-13-01", True, float("nan"), "", None, [1]])
def test_unreadable_times_are_none(value: object) -> None:
    assert times.parse(value) is None


def test_messages_are_grouped_by_their_session_and_keep_their_times(tmp_path: Path) -> None:
    rows = [{"role": "user", "content": "hello", "conversation_id": "a", "ts": 100},
            {"role": "user", "content": "other", "conversation_id": "b", "ts": 200},
            {"role": "assistant", "content": "hi", "conversation_id": "a"}]
    t = read("\n".join(json.dumps(r) for r in rows), "c.jsonl")
    assert t.format == "messages" and [s.key for s in t.sessions] == ["a", "b"]
    a = t.sessions[0]
    assert [m.content for m in a.messages] == ["user: hello", "assistant: hi"]
    assert [m.ts for m in a.messages] == [100.0, None] and a.ts == 100.0
    assert a.messages[1].where == "c.jsonl:3"


def test_sessions_with_dates_give_their_messages_the_session_time_and_order() -> None:
    doc = {"sessions": [{"id": "s1", "date": "2023-05-08 13:56", "messages": [
        {"speaker": "Ana", "text": "We booked the hotel."}, {"speaker": "Ben", "text": "Great."}]}]}
    t = read(json.dumps(doc), "trip.json")
    s = t.sessions[0]
    assert s.title == "Chat session, 2023-05-08 13:56" and s.ts == times.parse("2023-05-08 13:56")
    assert [m.ts for m in s.messages] == [s.ts + 1, s.ts + 2]
    assert [m.key for m in s.messages] == ["s1/1", "s1/2"]


def test_plain_text_is_one_session_of_paragraphs() -> None:
    t = read("First paragraph\nstill first.\n\n\n第二段。\n", "notes.txt")
    assert t.format == "text" and len(t.sessions) == 1
    assert [m.text for m in t.sessions[0].messages] == ["First paragraph\nstill first.", "第二段。"]
    assert [m.where for m in t.sessions[0].messages] == ["notes.txt:1", "notes.txt:5"]


@pytest.mark.parametrize(("text", "name", "where"), [
    ('{"role": "user", "content": "hi"}\n{"role": "user", "content": \n', "bad.jsonl", "bad.jsonl:2"),
    ('{"role": "user", "content": "hi"}\n{"role": "user", "content": 5}\n', "bad.jsonl", "bad.jsonl:2"),
    ('{"role": "user", "content": "hi", "timestamp": "soon"}\n', "bad.jsonl", "bad.jsonl:1"),
    ('{"role": "user", "content": "hi"}\n[1, 2]\n', "bad.jsonl", "bad.jsonl:2"),
    ('[{"role": "user", "content": "hi"}, {"role": "user", "text": ["x", 5]}]', "bad.json", "bad.json: [1]"),
    ('{"sessions": [{"messages": "hi"}]}', "bad.json", "bad.json: sessions[0]"),
    ("[]", "empty.json", "empty.json"),
])
def test_a_malformed_transcript_names_its_line(text: str, name: str, where: str) -> None:
    with pytest.raises(IngestError) as caught:
        read(text, name)
    assert caught.value.where == where and str(caught.value).startswith(where + ":")


# -- writing ----------------------------------------------------------------------------


def test_a_chat_is_ingested_at_its_own_times_with_its_speakers(open_memory, tmp_path, lang):
    mem = open_memory()
    path = jsonl(tmp_path / "chat.jsonl", CHATS[lang])
    report = mem.ingest(path)
    assert (report.sessions, report.messages, report.written, report.skipped, report.empty) == (1, 3, 4, 0, 1)
    task, *messages = mem.nodes()
    assert task.type is NodeType.TASK and task.id == report.session_ids[0]
    assert task.content == "Chat session, 2024-03-01 10:00 UTC" and task.created_at == 1709287200.0
    assert [m.created_at for m in messages] == [1709287200.0, 1709287205.0, 1709287300.0]
    assert [m.meta[SPEAKER] for m in messages] == ["user", "assistant", "user"]
    assert messages[1].importance == ASSISTANT_IMPORTANCE and messages[0].importance > ASSISTANT_IMPORTANCE
    assert all(m.meta[SOURCE] == "chat.jsonl" and m.parent_id == task.id for m in messages)
    assert messages[0].id in mem.retrieve(QUESTION[lang], k=3).ids


def test_a_message_merged_into_its_twin_is_counted_as_merged(open_memory, tmp_path, lang):
    """A user who says the same thing twice in a session: the second message merges
    into the first ([dedup]), and the report counts it as merged, not as written."""
    mem = open_memory()
    said = CHATS[lang][0]
    again = {**said, "timestamp": "2024-03-01T10:01:00Z"}
    report = mem.ingest(jsonl(tmp_path / "chat.jsonl", [*CHATS[lang], again]))
    live = [n for n in mem.nodes() if n.type is not NodeType.TASK]
    assert [n.content for n in live].count(f"user: {said['content']}") == 1
    assert report.merged == 1 and report.written == 1 + len(live)  # the session's task and the new messages
    # Turned off, the twin is a memory of its own and is written as one.
    plain = open_memory(namespace="plain", dedup={"enabled": False})
    report = plain.ingest(jsonl(tmp_path / "chat2.jsonl", [*CHATS[lang], again]))
    assert report.merged == 0 and report.written == 1 + 4


def test_the_same_file_twice_writes_nothing_twice(open_memory, tmp_path, lang):
    mem = open_memory()
    path = jsonl(tmp_path / "chat.jsonl", CHATS[lang])
    mem.ingest(path)
    before = contents(mem)
    again = mem.ingest(path)
    assert again.written == 0 and again.skipped == 4
    assert contents(mem) == before
    # The file grew: only the new message is written, under the same session.
    later = {"en": "I start a new job at a bakery in May.", "zh": "另外，我五月开始在一家面包店上班。"}[lang]
    grown = jsonl(path, [*CHATS[lang], {"role": "user", "content": later, "timestamp": 1709290000}])
    more = mem.ingest(grown)
    assert more.written == 1 and len(mem.nodes()) == len(before) + 1
    assert mem.nodes()[-1].parent_id == more.session_ids[0]


def test_a_refused_file_writes_nothing(open_memory, tmp_path, lang):
    mem = open_memory()
    mem.add(CHATS[lang][0]["content"], type="fact", parent=ROOT)
    before = contents(mem)
    rows = [*CHATS[lang], {"role": "user", "content": "x", "timestamp": "not a time"}]
    with pytest.raises(IngestError, match=r"chat.jsonl:5"):
        mem.ingest(jsonl(tmp_path / "chat.jsonl", rows))
    too_long = {"role": "user", "content": "y" * (mem.config.write.max_content_chars + 1)}
    with pytest.raises(IngestError, match=r"chat.jsonl:2"):
        mem.ingest(jsonl(tmp_path / "chat.jsonl", [CHATS[lang][0], too_long]))
    with pytest.raises(IngestError, match="no such file"):
        mem.ingest(tmp_path / "missing.jsonl")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(IngestError, match="not UTF-8"):
        mem.ingest(tmp_path / "latin1.txt")
    with pytest.raises(IngestError, match="exactly one"):
        mem.ingest(tmp_path / "a.txt", text="hello")
    with pytest.raises(IngestError, match="unknown format"):
        mem.ingest(text="hello", format="xml")
    assert contents(mem) == before


def test_a_dry_run_shows_the_tree_and_writes_nothing(open_memory, tmp_path, lang):
    mem = open_memory()
    report = mem.ingest(jsonl(tmp_path / "chat.jsonl", CHATS[lang]), dry_run=True)
    assert report.dry_run and report.written == 0 and report.session_ids == ()
    assert report.tree.splitlines()[1] == "[task] Chat session, 2024-03-01 10:00 UTC  (3 messages)"
    assert f"  [event] user: {CHATS[lang][0]['content']}" in report.tree
    assert mem.nodes() == []


def test_text_and_a_parent(open_memory, lang):
    mem = open_memory()
    project = mem.add({"en": "Relocation project", "zh": "搬家项目"}[lang], type="task", parent=ROOT)
    body = {"en": "The lease starts in April.\n\nThe movers come on the 3rd.",
            "zh": "租约四月开始。\n\n搬家公司三号来。"}[lang]
    seen: list[tuple[int, int]] = []
    report = mem.ingest(text=body, name="notes.md", parent=project, progress=lambda d, t: seen.append((d, t)))
    doc = mem.get(report.session_ids[0])
    assert doc.parent_id == project.id and doc.content == "Document notes.md"
    assert [n.content for n in mem.children(doc)] == body.split("\n\n")
    assert seen == [(2, 2)]


def test_sessions_are_placed_by_meaning_with_auto(open_memory, tmp_path, lang):
    mem = open_memory(write={"place_min": 0.2})
    trip = mem.add({"en": "Moving to Lisbon", "zh": "搬到里斯本"}[lang], type="task", parent=ROOT)
    mem.add({"en": "Looking for a flat in Lisbon with low rent", "zh": "在里斯本找房租便宜的公寓"}[lang],
            type="event", parent=trip)
    other = mem.add({"en": "Quarterly tax filing", "zh": "季度报税"}[lang], type="task", parent=ROOT)
    mem.add({"en": "The tax forms are due in April", "zh": "税表四月截止"}[lang], type="fact", parent=other)
    report = mem.ingest(jsonl(tmp_path / "chat.jsonl", CHATS[lang]), parent=AUTO)
    assert mem.get(report.session_ids[0]).parent_id == trip.id


def test_a_locomo_style_conversation_keeps_its_session_dates(open_memory, tmp_path):
    mem = open_memory()
    sample = {"sample_id": "conv-x", "conversation": {
        "speaker_a": "Ana", "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a cat."},
                      {"speaker": "Ben", "dia_id": "D1:2", "text": "Cute!", "blip_caption": "a grey cat"}],
        "session_2_date_time": "2:10 pm on 20 May, 2023",
        "session_2": [{"speaker": "Ana", "dia_id": "D2:1", "text": "The cat is called Miso."}]}}
    (tmp_path / "conv.json").write_text(json.dumps([sample]), encoding="utf-8")
    report = mem.ingest(tmp_path / "conv.json")
    assert report.format == "sessions" and report.sessions == 2
    first = mem.get(report.session_ids[0])
    assert first.content == "Session 1 of Ana and Ben, 1:56 pm on 8 May, 2023"
    turns = mem.children(first)
    assert [t.content for t in turns] == ["Ana: I adopted a cat.", "Ben: Cute! [shares an image: a grey cat]"]
    assert [t.created_at for t in turns] == [1683554161.0, 1683554162.0]
    assert turns[0].meta[SOURCE_ID] == "conv-x/D1:1"
    assert mem.active is not None and mem.active.id == report.session_ids[1]


SESSIONS = 120  # (enough that the ingest is still running when it is killed)


def test_a_crash_in_the_middle_of_an_ingest_is_finished_by_ingesting_again(tmp_path, stores, embedder):
    if not stores.is_sqlite:
        pytest.skip("the crashing process opens the folder's SQLite memory")
    # The process and this test read with the same one model (the test's own
    # embedder asks it once per text).
    config = tmp_path / "minilm.toml"
    config.write_text('[embedding]\nmodel = "bundled"\n')
    rows = [{"conversation_id": f"c{i}", "role": "user" if j % 2 == 0 else "assistant",
             "content": f"Session {i} message {j}: the budget line {i * 100 + j} was approved.", "ts": 1e9 + i * 1000 + j}
            for i in range(SESSIONS) for j in range(8)]
    path = jsonl(tmp_path / "big.jsonl", rows)
    folder = tmp_path / "crashed"
    proc = subprocess.Popen([sys.executable, "-m", "hybrid_memory", "--path", str(folder), "--config", str(config),
                             "ingest", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, HF_HUB_OFFLINE="1", ANONYMIZED_TELEMETRY="False"))
    db = folder / "memory.db"
    deadline = time.monotonic() + 120
    written = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            try:
                with sqlite3.connect(db, timeout=0.1) as conn:
                    written = conn.execute("select count(*) from hm_nodes").fetchone()[0]
            except sqlite3.Error:
                written = 0
            if written >= 60:
                break
        time.sleep(0.02)
    assert proc.poll() is None, "the ingest ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with MemoryTree.open(folder, config=config, embedder=embedder) as mem:
        partial = len(mem.nodes())
        assert 0 < partial < SESSIONS * 9
        report = mem.ingest(path)
        assert report.written == SESSIONS * 9 - partial
        crashed = contents(mem)
    with MemoryTree.open(tmp_path / "clean", config=config, embedder=embedder) as clean:
        clean.ingest(path)
        assert contents(clean) == crashed


def test_a_long_message_is_kept_whole_and_found_by_its_passage(open_memory, tmp_path, lang):
    from test_passages import DETAIL, report  # a long log with one detail in its middle
    from test_passages import QUESTION as ASKED

    mem = open_memory()
    long = report(lang)
    assert len(long) > 15_000 if lang == "en" else len(long) > 7_000
    path = jsonl(tmp_path / "log.jsonl", [{"role": "user", "content": long, "ts": 1e9},
                                          {"role": "assistant", "content": CHATS[lang][1]["content"], "ts": 1e9 + 5}])
    report_ = mem.ingest(path)
    message = mem.children(report_.session_ids[0])[0]
    assert message.content == "user: " + long  # whole
    hit = next(s for s in mem.retrieve(ASKED[lang], k=3, budget_tokens=400).nodes if s.node.id == message.id)
    assert hit.passage is not None and DETAIL[lang] in message.content[hit.passage[0]:hit.passage[1]]


# -- the front ends ---------------------------------------------------------------------

BUNDLED = {"embedding": {"model": "bundled"}}


def test_the_command_line_ingests_with_a_dry_run_first(tmp_path, capsys, lang):
    from hybrid_memory.cli import main
    from hybrid_memory.config import Config

    path = jsonl(tmp_path / "chat.jsonl", CHATS[lang])
    args = ["--path", str(tmp_path / "mem"), "--model", "bundled"]
    assert main([*args, "ingest", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"[event] user: {CHATS[lang][0]['content']}" in out and "dry run: would write 1 sessions" in out
    assert main([*args, "--json", "ingest", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["written"], report["skipped"], report["format"]) == (4, 0, "messages")
    assert main([*args, "ingest", str(path)]) == 0
    assert "wrote 0, merged 0 into near-twins, 4 already in" in capsys.readouterr().out
    bad = jsonl(tmp_path / "bad.jsonl", [CHATS[lang][0], {"role": "user", "content": 7}])
    assert main([*args, "ingest", str(bad)]) == IngestError.exit_code
    assert "error [invalid_transcript]: bad.jsonl:2:" in capsys.readouterr().err
    with MemoryTree.open(tmp_path / "mem", config=Config.load(overrides=BUNDLED)) as mem:
        assert len(mem.nodes()) == 4


def test_http_ingests_and_refuses_by_line(tmp_path, embedder, lang):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from hybrid_memory.server.app import create_app
    from hybrid_memory.server.keys import KeyFile

    keys = KeyFile(tmp_path / "keys.json")
    writer = keys.add("web", "write")
    app = create_app(keys=KeyFile(tmp_path / "keys.json"), path=tmp_path / "mem", embedder=embedder)
    text = "\n".join(json.dumps(m, ensure_ascii=False) for m in CHATS[lang])
    with TestClient(app, headers={"Authorization": f"Bearer {writer}"}) as c:
        dry = c.post("/v1/web/ingest", json={"text": text, "name": "chat.jsonl", "dry_run": True})
        assert dry.status_code == 200, dry.text
        assert dry.json()["written"] == 0 and dry.json()["sessions"] == 1
        done = c.post("/v1/web/ingest", json={"text": text, "name": "chat.jsonl"}).json()
        assert done["written"] == 4 and len(done["session_ids"]) == 1
        bad = c.post("/v1/web/ingest", json={"text": text + '\n{"role": "user", "content": 7}', "name": "chat.jsonl"})
        assert bad.status_code == 400 and bad.json()["error"] == "invalid_transcript"
        assert "chat.jsonl:5" in bad.json()["message"]
        nodes = c.get("/v1/web/tree", params={"archived": True}).json()["nodes"]
        assert len(nodes) == 4


def test_mcp_ingests(tmp_path, embedder, lang):
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client

    from hybrid_memory.mcp_server import build_server

    text = "\n".join(json.dumps(m, ensure_ascii=False) for m in CHATS[lang])
    with MemoryTree.open(tmp_path / "mem", namespace="agent", embedder=embedder) as mem:

        async def run() -> None:
            async with Client(build_server(mem)) as client:
                done = await client.call_tool("ingest", {"text": text, "name": "chat.jsonl"})
                assert not done.is_error, done.content
                assert done.structured_content is not None and done.structured_content["written"] == 4
                again = await client.call_tool("ingest", {"text": text, "name": "chat.jsonl"})
                assert again.structured_content is not None and again.structured_content["written"] == 0
                bad = await client.call_tool("ingest", {"text": "[1]", "name": "x.json"})
                assert bad.is_error and bad.structured_content is not None
                assert bad.structured_content["error"]["code"] == "invalid_transcript"

        anyio.run(run)
        assert len(mem.nodes()) == 4

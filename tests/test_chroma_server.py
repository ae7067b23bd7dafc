"""The vector index on a real Chroma server (``chroma run``, bound to 127.0.0.1 on a
free port): one API local or remote, tenants kept apart, an outage survived through
the outbox, and several writer processes losing nothing."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text as sql_text

from hybrid_memory import ROOT, ChromaIndex, MemoryTree, SentenceTransformerEmbedder, StorageError
from hybrid_memory.cli import main
from hybrid_memory.errors import InvalidInputError

Clock = Callable[[], float]  # conftest's settable clock (tests/ is not a package)

START_TIMEOUT = 30.0  # seconds for `chroma run` to answer its heartbeat
WORKER_TIMEOUT = 120.0  # seconds for one writer process (model load included)


def _chroma_binary() -> str | None:
    local = Path(sys.executable).with_name("chroma")
    return str(local) if local.exists() else shutil.which("chroma")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_env() -> dict[str, str]:
    return dict(os.environ, ANONYMIZED_TELEMETRY="False", NO_COLOR="1")


class ChromaServer:
    """One ``chroma run`` process on 127.0.0.1; stop() and start() again keep port and data."""

    def __init__(self, binary: str, data: Path) -> None:
        self.binary = binary
        self.data = data
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data.parent / f"{data.name}-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def command(self) -> list[str]:
        return [self.binary, "run", "--host", "127.0.0.1", "--port", str(self.port), "--path", str(self.data)]

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return "(no output)"

    def heartbeat(self) -> bool:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
        try:
            with opener.open(f"{self.url}/api/v2/heartbeat", timeout=1.0) as resp:
                return resp.status == 200 and b"heartbeat" in resp.read()
        except OSError:
            return False

    def start(self) -> None:
        assert self.proc is None, "already running"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=_server_env(),
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.heartbeat():
                return
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None
                pytest.fail(
                    f"`{' '.join(self.command)}` exited with code {code} before answering its "
                    f"heartbeat. Its output:\n{self.output()}"
                )
            time.sleep(0.1)
        self.stop()
        pytest.fail(
            f"`{' '.join(self.command)}` did not answer {self.url}/api/v2/heartbeat within "
            f"{START_TIMEOUT:.0f} s. Its output:\n{self.output()}"
        )

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _new_server(tmp: Path) -> ChromaServer:
    binary = _chroma_binary()
    if binary is None:
        pytest.skip("the `chroma` command (shipped with chromadb) is not installed")
    return ChromaServer(binary, tmp)


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    server = _new_server(tmp_path_factory.mktemp("chroma-server") / "data")
    server.start()
    try:
        yield server
    finally:
        server.stop()


# -- helpers -------------------------------------------------------------------------


def live_ids(mem: MemoryTree) -> set[str]:
    return {n.id for n in mem.nodes()}


def server_ids(url: str, namespace: str) -> set[str]:
    """What the server holds, read through a client of its own (not the memory's)."""
    index = ChromaIndex.server(url)
    try:
        return index.ids(namespace)
    finally:
        index.close()


def pending(mem: MemoryTree) -> int:
    with mem.store.reading() as conn:
        return len(mem.store.outbox.pending(conn, mem.namespace))


def open_remote(folder: Path, namespace: str, url: str, embedder: SentenceTransformerEmbedder, clock: Clock) -> MemoryTree:
    return MemoryTree.open(folder, namespace=namespace, chroma_url=url, embedder=embedder, clock=clock)


# -- without a server ----------------------------------------------------------------


def test_server_url_is_parsed_and_checked() -> None:
    from hybrid_memory.store.vectors import parse_server_url

    assert parse_server_url("http://127.0.0.1:8123") == ("127.0.0.1", 8123, False)
    assert parse_server_url("https://chroma.example") == ("chroma.example", 443, True)
    assert parse_server_url("http://localhost/") == ("localhost", 8000, False)
    for bad in ("", "127.0.0.1:8000", "ftp://h:1", "http://:80", "http://h:99999", "http://h:1/api?x=1"):
        with pytest.raises(InvalidInputError):
            parse_server_url(bad)


def test_open_refuses_bad_chroma_url_and_index_with_url(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    with pytest.raises(InvalidInputError, match="http"):
        MemoryTree.open(tmp_path / "m", chroma_url="ftp://127.0.0.1:1", embedder=embedder)
    with pytest.raises(InvalidInputError, match="not both"):
        MemoryTree.open(
            tmp_path / "m", chroma_url="http://127.0.0.1:1",
            index=ChromaIndex(tmp_path / "c"), embedder=embedder,
        )


def test_unreachable_server_raises_storage_error() -> None:
    index = ChromaIndex.server(f"http://127.0.0.1:{_free_port()}", timeout=5)
    import numpy as np

    calls: list[Any] = [
        lambda: index.ids("t"),
        lambda: index.upsert("t", ["a"], np.ones((1, 4), dtype=np.float32)),
        lambda: index.delete("t", ["a"]),
        lambda: index.query("t", np.ones((1, 4), dtype=np.float32), 3),
    ]
    try:
        for call in calls:
            with pytest.raises(StorageError, match="cannot reach the server"):
                call()
    finally:
        index.close()


# -- on the shared server ------------------------------------------------------------


def test_lifecycle_keeps_server_index_equal_to_live_ids(
    chroma_server: ChromaServer, tmp_path: Path, embedder: SentenceTransformerEmbedder, clock: Clock
) -> None:
    folder = tmp_path / "m"
    with open_remote(folder, "life", chroma_server.url, embedder, clock) as mem:
        task = mem.add("Renew the office lease with the landlord", type="task")
        kid = mem.add("The landlord wants a three-year term at 4% a year", type="fact")
        mem.add("Send the signed lease by Friday", type="decision", parent=kid)
        other = mem.add("Plan the team offsite in Lisbon", type="task", parent=ROOT)
        mem.add("The offsite budget is 12,000 euros", type="fact", parent=other)
        mem.flush()  # apply the index writes waiting for their batch
        assert server_ids(chroma_server.url, "life") == live_ids(mem) and len(live_ids(mem)) == 5
        assert not (folder / "chroma").exists(), "a server memory keeps no local index"

        recall = mem.retrieve("how long is the lease term?")
        assert kid.id in {s.node.id for s in recall.nodes}

        archived = mem.archive(kid)
        assert len(archived) == 2
        mem.flush()  # apply the index writes waiting for their batch
        assert server_ids(chroma_server.url, "life") == live_ids(mem) and len(live_ids(mem)) == 3

        mem.unarchive(kid)
        mem.flush()  # apply the index writes waiting for their batch
        assert server_ids(chroma_server.url, "life") == live_ids(mem) and len(live_ids(mem)) == 5

        deleted = mem.delete(other)
        assert len(deleted) == 2
        mem.flush()  # apply the index writes waiting for their batch
        assert server_ids(chroma_server.url, "life") == live_ids(mem) == {task.id, kid.id} | {
            n.id for n in mem.children(kid)
        }
        assert pending(mem) == 0


def test_two_namespaces_stay_separate_on_one_server(
    chroma_server: ChromaServer, tmp_path: Path, embedder: SentenceTransformerEmbedder, clock: Clock
) -> None:
    folder = tmp_path / "m"
    with open_remote(folder, "alice", chroma_server.url, embedder, clock) as a, \
            open_remote(folder, "bob", chroma_server.url, embedder, clock) as b:
        a.add("Alice's passport expires in March", type="fact", parent=ROOT)
        b.add("Bob's passport expires in July", type="fact", parent=ROOT)
        b.add("Bob prefers aisle seats", type="preference", parent=ROOT)
        a.flush()  # apply the index writes waiting for their batch
        b.flush()
        in_a, in_b = server_ids(chroma_server.url, "alice"), server_ids(chroma_server.url, "bob")
        assert in_a == live_ids(a) and len(in_a) == 1
        assert in_b == live_ids(b) and len(in_b) == 2
        assert not in_a & in_b
        hits = a.index.query("alice", embedder.embed(["when does the passport expire?"]), 10)[0]
        assert {i for i, _ in hits} == in_a
        recall = a.retrieve("when does the passport expire?")
        assert {s.node.id for s in recall.nodes} <= in_a


def test_reopening_recovers(
    chroma_server: ChromaServer, tmp_path: Path, embedder: SentenceTransformerEmbedder, clock: Clock
) -> None:
    folder = tmp_path / "m"
    with open_remote(folder, "again", chroma_server.url, embedder, clock) as mem:
        task = mem.add("Migrate the billing database to the new cluster", type="task")
        step = mem.add("Step 2 of 5: the replica is in sync", type="state")
        before = live_ids(mem)
    with open_remote(folder, "again", chroma_server.url, embedder, clock) as mem:
        r = mem.recover()
        assert r.active is not None and r.active.id == task.id
        assert r.state is not None and r.state.id == step.id
        assert live_ids(mem) == before == server_ids(chroma_server.url, "again")
        assert step.id in {s.node.id for s in mem.retrieve("is the replica in sync?").nodes}


def test_cli_with_db_url_and_chroma_url(
    chroma_server: ChromaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "elsewhere.db"
    common = ["--path", str(tmp_path / "folder"), "--namespace", "cli-remote",
              "--db-url", f"sqlite:///{db}", "--chroma-url", chroma_server.url]
    assert main([*common, "add", "The VPN certificate expires on 1 June", "--type", "fact"]) == 0
    node_id = capsys.readouterr().out.split()[1]
    assert db.exists() and not (tmp_path / "folder" / "memory.db").exists()
    assert not (tmp_path / "folder" / "chroma").exists()
    assert server_ids(chroma_server.url, "cli-remote") == {node_id}


# -- an outage -------------------------------------------------------------------------


def test_writes_survive_a_server_outage_and_the_outbox_drains_on_open(
    tmp_path: Path, embedder: SentenceTransformerEmbedder, clock: Clock
) -> None:
    server = _new_server(tmp_path / "own-server")  # its own server: stopping it harms no other test
    server.start()
    try:
        folder = tmp_path / "m"
        with open_remote(folder, "outage", server.url, embedder, clock) as mem:
            task = mem.add("Prepare the quarterly report", type="task")
            early = mem.add("Revenue grew 8% over the quarter", type="fact")
            doomed = mem.add("A draft chart nobody liked", type="event")
            mem.flush()  # apply the index writes waiting for their batch
            assert server_ids(server.url, "outage") == live_ids(mem)

            server.stop()
            late = mem.add("Costs fell 3% after the office move", type="fact")
            more = mem.add_many([
                {"content": "The board meets on the 14th", "type": "event"},
                {"content": "Use the new template for the slides", "type": "decision"},
            ])
            mem.archive(early)
            mem.delete(doomed)
            assert pending(mem) > 0, "the index work waits in the outbox"
            assert live_ids(mem) == {task.id, late.id} | {n.id for n in more}
            # reads keep working from the relational store (lexical retrieval)
            assert late.id in {s.node.id for s in mem.retrieve("costs fell after the office move").nodes}
            with pytest.raises(StorageError, match="cannot reach the server"):
                mem.index.ids("outage")
            expected = live_ids(mem)

        server.start()
        with open_remote(folder, "outage", server.url, embedder, clock) as mem:
            assert mem.recover().replayed > 0
            assert pending(mem) == 0
            assert live_ids(mem) == expected == server_ids(server.url, "outage")
    finally:
        server.stop()


# -- several writer processes ------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from hybrid_memory import ROOT, Config, MemoryTree

    folder, url, ns, me, count, ready, go, db = sys.argv[1:9]
    me, count = int(me), int(count)
    topics = ["invoice", "shipment", "contract", "meeting", "server", "budget", "hiring", "audit"]
    mem = MemoryTree.open(folder, namespace=ns, session=f"w{me}", chroma_url=url, store=db or None,
                          config=Config.load(overrides={"embedding": {"model": "bundled"}}))  # the parent's model
    mem.embedder.embed(["warm up"])
    Path(ready).touch()
    deadline = time.monotonic() + 60
    while not Path(go).exists():
        if time.monotonic() > deadline:
            sys.exit("no go signal")
        time.sleep(0.02)
    acked = []
    task = mem.add(f"Writer {me} runs its own project number {me * 7919}", type="task", parent=ROOT)
    acked.append(task.id)
    for i in range(count):
        topic = topics[(i + me) % len(topics)]
        node = mem.add(
            f"Writer {me}, item {i}: the {topic} record {me * 1000 + i} was checked at step {i * 13}",
            type="event", parent=task,
        )
        acked.append(node.id)
        print(json.dumps({"ack": node.id}), flush=True)
    batch = mem.add_many(
        {"content": f"Writer {me} batch note {j} about {topics[j]} code {me}-{j}", "type": "fact", "parent": task}
        for j in range(3)
    )
    acked.extend(n.id for n in batch)
    mem.close()
    print(json.dumps({"done": acked}), flush=True)
    os._exit(0)  # everything is committed and closed: skip the slow torch teardown
    """
)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str:
    """"" for the folder's SQLite file, or a PostgreSQL URL on a fresh schema."""
    if request.param == "sqlite":
        return ""
    admin = request.getfixturevalue("pg_admin")
    schema = f"hm_test_{secrets.token_hex(6)}"
    with admin.connect() as conn:
        conn.execute(sql_text(f'CREATE SCHEMA "{schema}"'))
    request.addfinalizer(lambda: _drop_schema(admin, schema))
    return f"{admin.url.render_as_string(hide_password=False)}?options=-csearch_path%3D{schema}"


def _drop_schema(admin: Any, schema: str) -> None:
    with admin.connect() as conn:
        conn.execute(sql_text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


def test_writer_processes_against_one_server_lose_nothing(
    chroma_server: ChromaServer, tmp_path: Path, embedder: SentenceTransformerEmbedder, clock: Clock, db_url: str
) -> None:
    """Several processes, one Chroma server, and one relational store: the folder's
    SQLite file, or PostgreSQL (the topology for several hosts)."""
    # The server outlives this test: each backend variant gets its own namespace.
    folder, ns, writers, count = tmp_path / "shared", "crowd-pg" if db_url else "crowd", 3, 12

    def open_shared() -> MemoryTree:
        return MemoryTree.open(folder, namespace=ns, chroma_url=chroma_server.url, store=db_url or None,
                               embedder=embedder, clock=clock)

    with open_shared():
        pass  # create the schema once, before the crowd arrives
    env = dict(
        os.environ, ANONYMIZED_TELEMETRY="False", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
        OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",  # 3 models, few cores
    )
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{w}" for w in range(writers)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(folder), chroma_server.url, ns, str(w), str(count), str(ready[w]), str(go), db_url],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )
        for w in range(writers)
    ]
    try:
        deadline = time.monotonic() + WORKER_TIMEOUT
        while not all(r.exists() for r in ready):
            dead = [p for p in procs if p.poll() is not None]
            assert not dead, f"a writer died while starting: {dead[0].stderr.read().decode()[-3000:]}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the writers did not start in time"
            time.sleep(0.05)
        go.touch()  # all at once
        acked: set[str] = set()
        for p in procs:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert p.returncode == 0, f"writer failed ({p.returncode}):\n{err.decode()[-3000:]}"
            lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
            done = [line["done"] for line in lines if "done" in line]
            assert done, f"writer printed no result:\n{out.decode()[-2000:]}"
            assert {line["ack"] for line in lines if "ack" in line} <= set(done[0])
            acked.update(done[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    assert len(acked) == writers * (count + 4), "every write made its own node"
    with open_shared() as mem:  # drains any leftover
        assert pending(mem) == 0
        live = live_ids(mem)
        assert acked <= live, f"lost: {sorted(acked - live)}"
        assert live == acked
        assert server_ids(chroma_server.url, ns) == live

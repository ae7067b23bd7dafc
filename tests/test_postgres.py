"""PostgreSQL only: several MemoryTree instances (each its own engine, so its own
database sessions) writing one namespace of one database at the same time.

The races are made deterministic where it matters: a "gate" holds one writer's
transaction just before its first change (after it has read, and locked, what
that change depends on) until the other writer is seen waiting on a row lock in
``pg_stat_activity``. Without the row locks of SqlStore the second writer would not
wait, the gate would time out, and the stale read would show in the tree.

Needs HYBRID_MEMORY_TEST_PG_URL (skipped without it, like every PostgreSQL variant).
"""

from __future__ import annotations

import contextlib
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import Clock, PgSchemas
from sqlalchemy import event
from sqlalchemy import text as sql
from sqlalchemy.engine import Engine

from hybrid_memory import (
    ROOT,
    Config,
    ConflictError,
    CycleError,
    MemoryTree,
    Node,
    NodeType,
    NotFoundError,
    SentenceTransformerEmbedder,
)
from hybrid_memory.store.sql import SqlStore

NO_DEDUP = Config.load(overrides={"dedup": {"enabled": False}})


class LockedEmbedder:
    """The session's embedder, one call at a time (the writers run in threads)."""

    def __init__(self, inner: SentenceTransformerEmbedder) -> None:
        self.inner = inner
        self.lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> Any:
        with self.lock:
            return self.inner.embed(texts)

    def coverage(self, text: str) -> float:
        with self.lock:
            return self.inner.coverage(text)


class Db:
    """One fresh schema, and memories opened on it (one engine each) over one
    shared folder for the Chroma index."""

    def __init__(self, schemas: PgSchemas, folder: Path, embedder: LockedEmbedder, clock: Clock) -> None:
        self.schemas = schemas
        self.schema = schemas.new()
        self.folder = folder
        self.embedder = embedder
        self.clock = clock
        self.opened: list[MemoryTree] = []
        self.gates: list[Gate] = []

    def gate(self, mem: MemoryTree, prefix: str) -> Gate:
        g = Gate(mem, prefix)
        self.gates.append(g)
        return g

    def open(self, who: str, *, namespace: str = "t") -> MemoryTree:
        """A memory whose database sessions carry the application name ``who``."""
        store = self.schemas.store(self.schema, application_name=self.app(who))
        mem = MemoryTree.open(
            self.folder, store=store, namespace=namespace, session=who,
            config=NO_DEDUP, embedder=self.embedder, clock=self.clock,
        )
        self.opened.append(mem)
        return mem

    def app(self, who: str) -> str:
        return f"{self.schema}_{who}"

    def waiting_on_lock(self, who: str, timeout: float = 15.0) -> bool:
        """Whether a session of ``who`` is (or within ``timeout`` becomes) blocked on a lock."""
        deadline = time.monotonic() + timeout
        with self.schemas.admin.connect() as conn:
            while time.monotonic() < deadline:
                n = conn.execute(
                    sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = :a AND wait_event_type = 'Lock'"),
                    {"a": self.app(who)},
                ).scalar_one()
                if n:
                    return True
                time.sleep(0.02)
        return False

    def close(self) -> None:
        for g in self.gates:  # a failed test must not leave a writer held
            g.open()
        for mem in self.opened:
            mem.close()


@pytest.fixture
def db(pg_admin: Engine, tmp_path: Path, embedder: SentenceTransformerEmbedder, clock: Clock) -> Iterator[Db]:
    schemas = PgSchemas(pg_admin)
    d = Db(schemas, tmp_path / "mem", LockedEmbedder(embedder), clock)
    try:
        yield d
    finally:
        d.close()
        schemas.drop_all()


class Gate:
    """Holds the first statement of ``mem``'s engine that starts with ``prefix``
    (e.g. "UPDATE hm_nodes") until :meth:`open` is called."""

    def __init__(self, mem: MemoryTree, prefix: str) -> None:
        self.prefix = prefix.upper()
        self.reached = threading.Event()
        self.released = threading.Event()
        self.armed = True
        self.engine = mem.store.engine
        event.listen(self.engine, "before_cursor_execute", self._hook)

    def _hook(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if self.armed and statement.lstrip().upper().startswith(self.prefix):
            self.armed = False
            self.reached.set()
            assert self.released.wait(60), "the gate was never opened"

    def open(self) -> None:
        # The listener stays (disarmed): removing it while the held thread's
        # statement is dispatching would mutate the list being iterated.
        self.released.set()


class Run(threading.Thread):
    """Runs ``fn`` in a thread, keeping its result or its exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:  # handed to the test
            self.error = exc

    def outcome(self, timeout: float = 60.0) -> Any:
        self.join(timeout)
        assert not self.is_alive(), "the writer never finished"
        if self.error is not None:
            raise self.error
        return self.result


def check_tree(nodes: Sequence[Node]) -> None:
    """No orphan, no cycle, paths and depths that follow the parents, live nodes
    under live parents and branch heads by the nearest_task rule."""
    by_id = {n.id: n for n in nodes}
    for n in nodes:
        chain = [n]
        while chain[-1].parent_id is not None:
            assert chain[-1].parent_id in by_id, f"{chain[-1].id} is an orphan"
            chain.append(by_id[chain[-1].parent_id])
            assert len(chain) <= len(nodes), f"a cycle through {n.id}"
        chain.reverse()
        assert n.path == "".join(f"{c.id}/" for c in chain), n
        assert n.depth == len(chain) - 1
        if n.live:
            assert all(c.live for c in chain), f"live {n.id} under an archived ancestor"
        tasks = [c.id for c in chain if c.type is NodeType.TASK]
        assert n.branch_id == (tasks[-1] if tasks else chain[0].id), n


def test_the_test_database_uses_c_ordering_for_paths(db: Db) -> None:
    """Subtree range scans need byte order: the path column has the "C" collation,
    whatever the database's default."""
    mem = db.open("a")
    with mem.store.engine.connect() as conn:
        collation = conn.execute(sql(
            "SELECT collation_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = 'hm_nodes' AND column_name = 'path'"
        )).scalar()
        assert collation == "C"
    # Ids sort below "/"-less neighbours the way subtree_range assumes.
    root = mem.add("A task with a subtree", type="task", parent=ROOT)
    child = mem.add("Its first child", type="fact", parent=root)
    other = mem.add("An unrelated task", type="task", parent=ROOT)
    assert [n.id for n in mem.children(root)] == [child.id]
    assert mem.archive(root) == [root.id, child.id] and mem.get(other).live


def test_two_writers_on_one_namespace_lose_nothing_and_keep_the_tree_acyclic(db: Db) -> None:
    a, b = db.open("a"), db.open("b")
    shared = a.add("Shared project: move the office to the new building", type="task", parent=ROOT)
    acked: dict[str, set[str]] = {"a": {shared.id}, "b": set()}
    errors: list[BaseException] = []

    def writer(mem: MemoryTree, who: str, seed: int) -> None:
        rng = random.Random(seed)
        mine: list[str] = []
        try:
            for i in range(14):
                op = rng.random()
                if op < 0.45 or not mine:
                    parent = rng.choice([shared.id, *mine])
                    kind = rng.choice(["fact", "event", "task"])
                    node = mem.add(f"writer {who} item {i}: {secrets.token_hex(4)} boxes packed", type=kind, parent=parent)
                    mine.append(node.id)
                    acked[who].add(node.id)
                elif op < 0.7:
                    out = mem.add_many([
                        {"key": "p", "content": f"writer {who} batch {i} head {secrets.token_hex(4)}", "type": "task",
                         "parent": rng.choice([shared.id, *mine])},
                        {"content": f"writer {who} batch {i} detail {secrets.token_hex(4)}", "type": "fact", "parent": "p"},
                    ])
                    mine += [n.id for n in out]
                    acked[who] |= {n.id for n in out}
                else:
                    # Move one of ours under anything live (the other writer's nodes too).
                    everything = [n.id for n in mem.nodes()]
                    with contextlib.suppress(CycleError):
                        mem.move(rng.choice(mine), rng.choice(everything))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=writer, args=(a, "a", 1)),
        threading.Thread(target=writer, args=(b, "b", 2)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a writer hung"
    assert not errors, errors

    for mem in (a, b):  # both see the same, complete tree
        nodes = mem.nodes(include_archived=True)
        assert {n.id for n in nodes} == acked["a"] | acked["b"]
        assert all(n.live for n in nodes)
        check_tree(nodes)
    a.flush()
    assert a.index.ids("t") == acked["a"] | acked["b"]
    assert a.admin.stats().live == len(acked["a"] | acked["b"])


@pytest.mark.parametrize("first", ["add", "move"])
def test_a_move_racing_an_add_under_the_moved_node_leaves_no_orphan(db: Db, first: str) -> None:
    a = db.open("a")
    root = a.add("Plan the product launch", type="task", parent=ROOT)
    moved = a.add("Prepare the press kit", type="task", parent=root)
    under = a.add("Collect the product photos", type="event", parent=moved)
    target = a.add("Marketing backlog", type="task", parent=ROOT)
    b = db.open("b")

    if first == "add":
        # b has locked the chain above `under` and is about to insert its child;
        # a's move must wait for it, and then carry the new child along.
        gate = db.gate(b, "INSERT INTO hm_nodes")
        adding = Run(lambda: b.add("The photographer sends the files on Friday", type="fact", parent=under.id))
        assert gate.reached.wait(30)
        moving = Run(lambda: a.move(moved, target))
        assert db.waiting_on_lock("a"), "the move did not wait for the add's row locks"
    else:
        # a has locked the moved subtree and is about to rewrite its paths; b's add
        # must wait for it, and then read the parent's new path.
        gate = db.gate(a, "UPDATE hm_nodes")
        moving = Run(lambda: a.move(moved, target))
        assert gate.reached.wait(30)
        adding = Run(lambda: b.add("The photographer sends the files on Friday", type="fact", parent=under.id))
        assert db.waiting_on_lock("b"), "the add did not wait for the move's row locks"
    gate.open()
    child = adding.outcome()
    moving.outcome()

    nodes = a.nodes(include_archived=True)
    check_tree(nodes)
    stored = a.get(child.id)
    assert stored.parent_id == under.id
    assert stored.path == f"{target.id}/{moved.id}/{under.id}/{child.id}/"
    assert stored.branch_id == moved.id
    assert {n.id for n in a.children(under)} == {child.id}


def test_crossed_moves_cannot_make_a_cycle(db: Db) -> None:
    a = db.open("a")
    root = a.add("Reorganise the wiki", type="task", parent=ROOT)
    x = a.add("The onboarding pages", type="task", parent=root)
    y = a.add("The HR pages", type="task", parent=root)
    b = db.open("b")
    gate = db.gate(a, "UPDATE hm_nodes")
    first = Run(lambda: a.move(x, y))  # x under y ...
    assert gate.reached.wait(30)
    second = Run(lambda: b.move(y, x))  # ... and, at the same time, y under x
    assert db.waiting_on_lock("b"), "the second move did not wait for the first"
    gate.open()
    assert first.outcome().parent_id == y.id
    with pytest.raises(CycleError):
        second.outcome()
    check_tree(a.nodes(include_archived=True))
    assert a.get(y).parent_id == root.id


def test_an_add_racing_an_archive_of_its_parent_is_refused_or_archived_with_it(db: Db) -> None:
    a = db.open("a")
    root = a.add("Clean up the old CRM", type="task", parent=ROOT)
    leaf = a.add("Export the contact list", type="event", parent=root)
    b = db.open("b")
    gate = db.gate(b, "INSERT INTO hm_nodes")
    adding = Run(lambda: b.add("The export has 4,000 rows", type="fact", parent=leaf.id))
    assert gate.reached.wait(30)
    archiving = Run(lambda: a.archive(root))
    assert db.waiting_on_lock("a"), "the archive did not wait for the add"
    gate.open()
    child = adding.outcome()
    assert set(archiving.outcome()) == {root.id, leaf.id, child.id}  # the new child went with them
    nodes = a.nodes(include_archived=True)
    check_tree(nodes)
    assert not any(n.live for n in nodes)
    # Afterwards, adding under the archived node is refused.
    with pytest.raises(NotFoundError):
        b.add("Too late", type="fact", parent=leaf.id)


def test_a_stale_expected_version_raises_conflict(db: Db) -> None:
    a, b = db.open("a"), db.open("b")
    node = a.add("The meeting is on Tuesday", type="fact", parent=ROOT)
    seen = b.get(node.id)
    a.update(node, content="The meeting moved to Wednesday", expected_version=node.version)
    with pytest.raises(ConflictError):
        b.update(seen.id, content="The meeting is on Thursday", expected_version=seen.version)
    assert b.get(node.id).content == "The meeting moved to Wednesday"


def test_two_racing_updates_of_one_version_let_exactly_one_win(db: Db) -> None:
    a, b = db.open("a"), db.open("b")
    node = a.add("The budget is 10,000 euros", type="fact", parent=ROOT, importance=0.5)
    gate = db.gate(a, "UPDATE hm_nodes")
    first = Run(lambda: a.update(node, importance=0.9, expected_version=node.version))
    assert gate.reached.wait(30)
    second = Run(lambda: b.update(node.id, importance=0.1, expected_version=node.version))
    assert db.waiting_on_lock("b"), "the second update did not wait for the first's row lock"
    gate.open()
    assert first.outcome().version == node.version + 1
    with pytest.raises(ConflictError):
        second.outcome()
    stored = b.get(node.id)
    assert (stored.version, stored.importance) == (node.version + 1, 0.9)


def test_feedback_from_two_writers_adds_up(db: Db) -> None:
    """A read-modify-write without expected_version: both raises count."""
    a, b = db.open("a"), db.open("b")
    node = a.add("The user prefers short answers", type="preference", parent=ROOT, importance=0.2)
    step = a.config.feedback.important_step
    gate = db.gate(a, "UPDATE hm_nodes")
    first = Run(lambda: a.feedback(node, important=True))
    assert gate.reached.wait(30)
    second = Run(lambda: b.feedback(node.id, important=True))
    assert db.waiting_on_lock("b")
    gate.open()
    first.outcome()
    second.outcome()
    stored = a.get(node.id)
    assert stored.importance == pytest.approx(0.2 + 2 * step)
    assert stored.version == node.version + 2


def test_forget_waits_for_an_add_under_a_leaf_it_would_take(db: Db) -> None:
    a = db.open("a")
    root = a.add("An old errand", type="task", parent=ROOT, importance=0.0, confidence=0.0)
    leaf = a.add("Bought the stamps", type="event", parent=root, importance=0.0, confidence=0.0)
    a.focus(a.add("Current work", type="task", parent=ROOT, importance=1.0, confidence=1.0, pinned=True))
    b = db.open("b")
    gate = db.gate(b, "INSERT INTO hm_nodes")
    adding = Run(lambda: b.add("Posted the letters too", type="event", parent=leaf.id, importance=1.0, confidence=1.0))
    assert gate.reached.wait(30)
    forgetting = Run(lambda: a.forget(threshold=0.5))
    assert db.waiting_on_lock("a"), "forget did not wait for the add"
    gate.open()
    child = adding.outcome()
    report = forgetting.outcome()
    # leaf now has a heavy live child: neither it nor its parent may go.
    assert leaf.id not in report.archived and root.id not in report.archived
    nodes = a.nodes(include_archived=True)
    check_tree(nodes)
    assert a.get(child.id).live


def test_unreachable_server_is_a_storage_error() -> None:
    from hybrid_memory import StorageError

    with pytest.raises(StorageError):
        SqlStore("postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2")

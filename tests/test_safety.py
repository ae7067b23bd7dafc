"""Safety: encryption at rest (nothing said is stored in plain text, wrong or missing
keys refused, rotation), the hash-chained audit trail, erasure that leaves no bytes
behind, handle roles and write limits. Real SQLite files, real Chroma, real model."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Clock, OpenMemory, Stores

from hybrid_memory import (
    ROOT,
    AccessDeniedError,
    Config,
    EncryptionKeyError,
    InvalidInputError,
    Keyring,
    MemoryTree,
    SentenceTransformerEmbedder,
    generate_key,
    text,
)
from hybrid_memory.cli import main as cli
from hybrid_memory.safety import sealed_share, verify_audit
from hybrid_memory.store.sql import SqlStore

# Secrets that must never reach the disk in plain text: English and Chinese, with a
# word that appears nowhere else (a lexical index in plain text would hold it).
SECRETS = [
    "Zhang San's passport number is E98127734, kept in drawer Quokkaville",
    "张三的银行卡密码是七九三一，放在蓝色抽屉里",
    "The merger codename is Operation Bluefinch",
]
NOTE = "paused while waiting for Quokkaville legal"


def _files(folder: Path) -> Iterator[Path]:
    for p in folder.rglob("*"):
        if p.is_file():
            yield p


#: The words of the test texts that occur nowhere else (no schema, no library file):
#: a plain lexical index, or a plain copy of a text, would hold them.
RARE = ["E98127734", "Quokkaville", "Bluefinch", "银行卡密码", "蓝色抽屉", "七九三一", "Zanzibarine", "77120",
        "体检报告", "Quillhaven", "Darjeeling", "Glenburn", "Reykjavik", "Wombatfield"]


def _needles(content: str) -> list[bytes]:
    """Byte strings whose presence would leak ``content``: the whole of it, and each of
    its rare words, as written, lowercased and as the lexical index keeps them (a
    lowercased stem), in UTF-8."""
    words = [w for w in RARE if w in content]
    kept = {*(w.lower() for w in words), *(text.stem(w.lower()) for w in words if w.isalpha())}
    return [s.encode("utf-8") for s in sorted({content, *words, *kept})]


def _leaks(paths: list[Path], texts: list[str]) -> list[tuple[str, bytes]]:
    found = []
    for p in paths:
        data = p.read_bytes()
        for t in texts:
            for needle in _needles(t):
                if needle in data:
                    found.append((str(p), needle))
    return found


def _open(folder: Path, embedder: SentenceTransformerEmbedder, clock: Clock, **kw: Any) -> MemoryTree:
    kw.setdefault("config", Config.load())
    return MemoryTree.open(folder, embedder=embedder, clock=clock, **kw)


def _fill(mem: MemoryTree) -> dict[str, str]:
    task = mem.add("Travel booking for the Q3 offsite", type="task")
    ids = {"task": task.id}
    for i, s in enumerate(SECRETS):
        ids[f"s{i}"] = mem.add(s, type="fact", parent=task, meta={"source": s[:20]}).id
    mem.update(ids["s2"], content=SECRETS[2] + " (confirmed)")
    mem.feedback(ids["s0"], important=True)
    mem.checkpoint(NOTE)
    return ids


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    p = tmp_path / "keys" / "memory.key"
    p.parent.mkdir()
    p.write_text(generate_key() + "\n")
    return p


# -- encryption at rest ------------------------------------------------------------------


def test_no_plain_text_of_a_secret_reaches_any_file(tmp_path: Path, embedder: SentenceTransformerEmbedder,
                                                    clock: Clock, key_file: Path) -> None:
    """Contents, metadata, log payloads, checkpoint notes, the lexical index and the
    export hold none of the secrets (nor their distinctive words) in plain text; the
    same memory without a key holds them (the scan can see them)."""
    folder, plain_folder = tmp_path / "enc", tmp_path / "plain"
    ring = Keyring.from_file(key_file)
    with _open(folder, embedder, clock, key=ring) as mem:
        _fill(mem)
        mem.admin.export(tmp_path / "enc.jsonl", include_log=True)
        mem.retrieve("passport number", k=3)
        # While it is open, the WAL holds the latest pages: nothing plain there either.
        assert (folder / "memory.db-wal").stat().st_size > 0
        assert _leaks(list(_files(folder)), [*SECRETS, NOTE]) == []
    with _open(plain_folder, embedder, clock) as mem:
        _fill(mem)
        mem.admin.export(tmp_path / "plain.jsonl", include_log=True)
    texts = [*SECRETS, NOTE]
    sealed = [*_files(folder), tmp_path / "enc.jsonl"]
    assert any(p.name == "memory.db" for p in sealed)
    assert _leaks(sealed, texts) == []
    # The scan is able to see a leak: the plain memory and its export hold every secret.
    plain = [*_files(plain_folder), tmp_path / "plain.jsonl"]
    leaked = {n for _, n in _leaks(plain, texts)}
    assert all(s.encode() in leaked for s in SECRETS[:2])
    assert text.stem("quokkaville").encode() in leaked  # a lexical term, lowercased and stemmed


def test_an_encrypted_memory_reads_back_and_finds_by_words(tmp_path: Path, embedder: SentenceTransformerEmbedder,
                                                           clock: Clock, key_file: Path) -> None:
    """Reopened with its key: contents, meta and notes read back exactly; a query by a
    rare word finds its node (the blinded lexical index works); an exact twin merges."""
    ring = Keyring.from_file(key_file)
    with _open(tmp_path / "m", embedder, clock, key=ring) as mem:
        ids = _fill(mem)
    with _open(tmp_path / "m", embedder, clock, key=Keyring.from_file(key_file)) as mem:
        assert mem.get(ids["s1"]).content == SECRETS[1]
        assert mem.get(ids["s1"]).meta == {"source": SECRETS[1][:20]}
        assert mem.get(ids["s2"]).content == SECRETS[2] + " (confirmed)"
        assert mem.recover().last_checkpoint.note == NOTE  # type: ignore[union-attr]
        top = mem.retrieve("Bluefinch", k=3).nodes
        assert ids["s2"] in [s.node.id for s in top if s.reason == "hit"]
        top = mem.retrieve("银行卡密码", k=3).nodes
        assert ids["s1"] in [s.node.id for s in top if s.reason == "hit"]
        twin = mem.add(SECRETS[0], type="fact", parent=ids["task"])
        assert twin.id == ids["s0"] and twin.merged


def test_missing_or_wrong_key_is_refused_and_changes_nothing(tmp_path: Path, embedder: SentenceTransformerEmbedder,
                                                             clock: Clock, key_file: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "m"
    with _open(folder, embedder, clock, key=Keyring.from_file(key_file)) as mem:
        _fill(mem)

    def digest() -> str:
        return hashlib.sha256((folder / "memory.db").read_bytes()).hexdigest()

    before = digest()
    monkeypatch.delenv("HYBRID_MEMORY_KEY", raising=False)
    monkeypatch.delenv("HYBRID_MEMORY_KEY_FILE", raising=False)
    with pytest.raises(EncryptionKeyError, match="encrypted"):
        _open(folder, embedder, clock)
    with pytest.raises(EncryptionKeyError, match="wrong key"):
        _open(folder, embedder, clock, key=generate_key())
    with pytest.raises(EncryptionKeyError, match="32 bytes"):
        _open(folder, embedder, clock, key="not a key")
    assert digest() == before
    # The key from the environment opens it.
    monkeypatch.setenv("HYBRID_MEMORY_KEY_FILE", str(key_file))
    with _open(folder, embedder, clock) as mem:
        assert len(mem.nodes()) == 4


def test_a_key_file_inside_the_memory_folder_is_refused(tmp_path: Path, embedder: SentenceTransformerEmbedder,
                                                       clock: Clock) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "key").write_text(generate_key())
    with pytest.raises(EncryptionKeyError, match="inside the memory's folder"):
        _open(folder, embedder, clock, config=Config.load(overrides={"security": {"key_file": str(folder / "key")}}))
    assert not (folder / "memory.db").exists()


def test_opening_a_plain_memory_with_a_key_is_refused(tmp_path: Path, embedder: SentenceTransformerEmbedder,
                                                      clock: Clock) -> None:
    with _open(tmp_path / "m", embedder, clock) as mem:
        mem.add("plain words", type="task")
    with pytest.raises(EncryptionKeyError, match="rotate-key"):
        _open(tmp_path / "m", embedder, clock, key=generate_key())


def test_rotation_reseals_everything_and_retires_the_old_key(tmp_path: Path, embedder: SentenceTransformerEmbedder,
                                                             clock: Clock) -> None:
    """A plain memory is sealed by rotate-key, then rotated to a second key: every
    sealed column ends under the new key, the old key alone is refused, the new one
    reads everything and finds by words; a handle holding both kept working."""
    folder = tmp_path / "m"
    with _open(folder, embedder, clock) as mem:
        ids = _fill(mem)
    a, b = generate_key(), generate_key()
    (tmp_path / "a.key").write_text(a)
    (tmp_path / "b.key").write_text(b)
    assert cli(["--path", str(folder), "rotate-key", "--new-key-file", str(tmp_path / "a.key")]) == 0
    assert _leaks(list(_files(folder)), SECRETS) == []
    both = Keyring([b, a])
    with _open(folder, embedder, clock, key=Keyring([a])) as mem:
        assert mem.get(ids["s0"]).content == SECRETS[0]
    with _open(folder, embedder, clock, key=both) as during:
        assert cli(["--path", str(folder), "--key-file", str(tmp_path / "a.key"),
                    "rotate-key", "--new-key-file", str(tmp_path / "b.key")]) == 0
        # A handle holding both keys reads and writes through the rotation.
        extra = during.add("written during the rotation: Wombatfield", type="fact", parent=ids["task"])
    store = SqlStore(f"sqlite:///{folder / 'memory.db'}", keyring=Keyring([b]))
    try:
        share = sealed_share(store)
    finally:
        store.close()
    assert all(n == total and total > 0 for col, (n, total) in share.items()), share
    with pytest.raises(EncryptionKeyError, match="wrong key"):
        _open(folder, embedder, clock, key=Keyring([a]))
    with _open(folder, embedder, clock, key=Keyring([b])) as mem:
        assert mem.get(ids["s1"]).content == SECRETS[1]
        assert mem.get(extra.id).content.endswith("Wombatfield")
        assert ids["s2"] in [s.node.id for s in mem.retrieve("Bluefinch", k=3).nodes]
        assert mem.add(SECRETS[0], type="fact", parent=ids["task"]).merged
    assert _leaks(list(_files(folder)), SECRETS) == []


def test_an_encrypted_export_imports_only_with_the_key(tmp_path: Path, embedder: SentenceTransformerEmbedder,
                                                       clock: Clock) -> None:
    ring = Keyring([generate_key()])
    with _open(tmp_path / "a", embedder, clock, key=ring) as mem:
        ids = _fill(mem)
        mem.admin.export(tmp_path / "x.jsonl")
    with _open(tmp_path / "b", embedder, clock) as plain, pytest.raises(EncryptionKeyError, match="encrypted"):
        plain.admin.import_(tmp_path / "x.jsonl")
    with _open(tmp_path / "c", embedder, clock, key=ring) as mem:
        assert mem.admin.import_(tmp_path / "x.jsonl").nodes == 4
        assert mem.get(ids["s1"]).content == SECRETS[1]
        assert ids["s2"] in [s.node.id for s in mem.retrieve("Bluefinch", k=3).nodes]


def test_an_altered_sealed_content_is_an_error_not_garbage(tmp_path: Path, embedder: SentenceTransformerEmbedder,
                                                           clock: Clock) -> None:
    from hybrid_memory import StorageError

    ring = Keyring([generate_key()])
    with _open(tmp_path / "m", embedder, clock, key=ring) as mem:
        node = mem.add("a sealed fact", type="task")
    con = sqlite3.connect(tmp_path / "m" / "memory.db")
    (value,) = con.execute("SELECT content FROM hm_nodes WHERE id = ?", (node.id,)).fetchone()
    flipped = value[:-2] + ("A" if value[-2] != "A" else "B") + value[-1]
    con.execute("UPDATE hm_nodes SET content = ? WHERE id = ?", (flipped, node.id))
    con.commit()
    con.close()
    with _open(tmp_path / "m", embedder, clock, key=ring) as mem, pytest.raises(StorageError, match="altered"):
        mem.get(node.id)


def test_encryption_on_postgresql(embedder: SentenceTransformerEmbedder, clock: Clock, tmp_path: Path,
                                  stores: Stores) -> None:
    """The same sealing through PostgreSQL: the rows hold no plain text, the handle reads them."""
    if stores.is_sqlite:
        pytest.skip("PostgreSQL only")
    assert stores.schemas is not None
    schema = stores.schemas.new()
    ring = Keyring([generate_key()])
    from sqlalchemy import create_engine

    def make() -> SqlStore:
        engine = create_engine(stores.schemas.admin.url,  # type: ignore[union-attr]
                               connect_args={"options": f"-csearch_path={schema}"})
        return SqlStore(engine, keyring=ring)

    mem = MemoryTree.open(tmp_path / "pg", store=make(), key=ring, embedder=embedder, clock=clock)
    ids = _fill(mem)
    mem.close()
    from sqlalchemy import text

    with stores.schemas.admin.connect() as conn:
        conn.execute(text(f'SET search_path TO "{schema}"'))
        dump = json.dumps([list(r) for r in conn.execute(text("SELECT content, meta FROM hm_nodes"))]
                          + [list(r) for r in conn.execute(text("SELECT payload FROM hm_oplog"))]
                          + [list(r) for r in conn.execute(text("SELECT term FROM hm_terms"))], ensure_ascii=False)
    for s in SECRETS:
        assert all(n.decode() not in dump for n in _needles(s))
    with MemoryTree.open(tmp_path / "pg", store=make(), key=ring, embedder=embedder, clock=clock) as mem:
        assert mem.get(ids["s1"]).content == SECRETS[1]
        assert ids["s2"] in [s.node.id for s in mem.retrieve("Bluefinch", k=3).nodes]


# -- the audit trail ----------------------------------------------------------------------


def _audited(open_memory: OpenMemory, **kw: Any) -> MemoryTree:
    return open_memory(security={"audit": True}, **kw)


def test_the_audit_trail_records_who_did_what_without_contents(open_memory: OpenMemory) -> None:
    mem = _audited(open_memory)
    ids = _fill(mem)
    recall = mem.retrieve("passport", k=3)
    mem.archive(ids["s2"])
    mem.delete(ids["s1"])
    mem.admin.export(mem.folder / "x.jsonl")  # type: ignore[operator]
    from sqlalchemy import select

    from hybrid_memory.store.schema import audit

    with mem.store.reading() as conn:
        rows = [dict(r._mapping) for r in conn.execute(select(audit).order_by(audit.c.seq))]
    actions = [r["action"] for r in rows]
    assert actions[:2] == ["add", "add"] and {"update", "feedback", "checkpoint", "retrieve", "archive",
                                                "delete", "export"} <= set(actions)
    got = next(r for r in rows if r["action"] == "retrieve")
    assert json.loads(got["node_ids"]) == [s.node.id for s in recall.nodes]
    assert all(r["actor"] == "main" and r["namespace"] == "t" for r in rows)
    assert ids["s1"] in json.loads(next(r for r in rows if r["action"] == "delete")["node_ids"])
    blob = json.dumps(rows, ensure_ascii=False)
    for s in [*SECRETS, NOTE]:
        assert all(n.decode() not in blob for n in _needles(s))
    check = verify_audit(mem.store)
    assert check.ok and check.entries == len(rows)


def _tamper(mem: MemoryTree, sql: str, *params: Any) -> None:
    """Change the audit table behind the library's back (an attacker with file access)."""
    from sqlalchemy import text

    with mem.store.engine.begin() as conn:
        conn.execute(text(sql), {f"p{i}": v for i, v in enumerate(params)})


@pytest.mark.parametrize("attack", ["edit", "remove_middle", "remove_last", "insert"])
def test_audit_verify_detects_an_edited_or_removed_entry(open_memory: OpenMemory, attack: str) -> None:
    mem = _audited(open_memory)
    _fill(mem)
    mem.retrieve("passport", k=3)
    assert verify_audit(mem.store).ok
    n = verify_audit(mem.store).entries
    if attack == "edit":
        _tamper(mem, "UPDATE hm_audit SET actor = 'mallory' WHERE seq = 3")
    elif attack == "remove_middle":
        _tamper(mem, "DELETE FROM hm_audit WHERE seq = 2")
    elif attack == "remove_last":
        _tamper(mem, "DELETE FROM hm_audit WHERE seq = :p0", n)
    else:
        _tamper(mem, "UPDATE hm_audit SET seq = seq + 1000 WHERE seq >= 4")
        _tamper(mem, "UPDATE hm_audit SET seq = seq - 999 WHERE seq >= 1004")
    check = verify_audit(mem.store)
    assert not check.ok
    assert check.bad_seq == {"edit": 3, "remove_middle": 2, "remove_last": n, "insert": 4}[attack]


def test_audit_cli_verify_exit_codes(open_memory: OpenMemory, stores: Stores, capsys: pytest.CaptureFixture[str]) -> None:
    if not stores.is_sqlite:
        pytest.skip("the CLI opens memory.db in --path")
    mem = _audited(open_memory)
    _fill(mem)
    folder = str(mem.folder)
    mem.close()
    assert cli(["--path", folder, "audit", "verify"]) == 0
    assert "intact" in capsys.readouterr().out
    assert cli(["--path", folder, "-n", "t", "audit", "show"]) == 0
    assert "checkpoint" in capsys.readouterr().out
    con = sqlite3.connect(Path(folder) / "memory.db")
    con.execute("UPDATE hm_audit SET action = 'get' WHERE seq = 1")
    con.commit()
    con.close()
    assert cli(["--path", folder, "audit", "verify"]) == 1
    assert "BROKEN at entry 1" in capsys.readouterr().out


def test_audit_stays_on_for_a_handle_that_did_not_ask(open_memory: OpenMemory, tmp_path: Path) -> None:
    """Once a store holds an audit trail, every handle writes to it."""
    mem = _audited(open_memory)
    mem.add("first", type="task")
    n = verify_audit(mem.store).entries
    other = open_memory(namespace="u")
    other.add("second", type="task")
    check = verify_audit(other.store)
    assert check.ok and check.entries == n + 1


# -- erasure ---------------------------------------------------------------------------------


def test_erase_leaves_no_bytes_of_a_subtree_on_disk(tmp_path: Path, embedder: SentenceTransformerEmbedder,
                                                    clock: Clock) -> None:
    """A subtree erased: none of its words in memory.db, its WAL, or the Chroma folder;
    what was kept is still there and still found; the audit trail says it happened."""
    folder = tmp_path / "m"
    config = Config.load(overrides={"security": {"audit": True}})
    gone_words = ["Zanzibarine courier tracking 77120 for the erased parcel",
                  "李四的体检报告显示血压偏高，需要复查"]
    kept = "The kept itinerary flies through Reykjavik on Tuesday"
    with _open(folder, embedder, clock, config=config) as mem:
        keep_task = mem.add("Trip planning", type="task")
        mem.add(kept, type="fact", parent=keep_task)
        doomed = mem.add("Parcel and health errands", type="task")
        for w in gone_words:
            mem.add(w, type="fact", parent=doomed)
        mem.checkpoint("before the erasure")
        mem.update(mem.children(doomed)[0], content=gone_words[0] + " (updated)")
        erased = mem.admin.erase(doomed)
        assert len(erased) == 3
        assert [s.node.content for s in mem.retrieve("itinerary Reykjavik", k=2).nodes if s.reason == "hit"] == [kept]
        assert mem.admin.verify().clean
    files = list(_files(folder))
    assert _leaks(files, gone_words) == []
    assert _leaks([folder / "memory.db"], [kept])  # the scan sees what was kept
    store = SqlStore(f"sqlite:///{folder / 'memory.db'}")
    try:
        assert verify_audit(store).ok
        with store.reading() as conn:
            from sqlalchemy import select

            from hybrid_memory.store.schema import audit
            row = conn.execute(select(audit).where(audit.c.action == "delete")).one()
        assert set(json.loads(row.node_ids)) == set(erased)
    finally:
        store.close()


def test_erase_namespace_removes_one_tenant_and_keeps_the_other(tmp_path: Path, embedder: SentenceTransformerEmbedder,
                                                                clock: Clock) -> None:
    folder = tmp_path / "m"
    alice_words = ["Alice's therapist appointment is at Quillhaven clinic"]
    bob_words = ["Bob's favourite tea is Darjeeling from Glenburn estate"]
    with _open(folder, embedder, clock, namespace="alice") as alice, \
            _open(folder, embedder, clock, namespace="bob") as bob:
        t = alice.add("Alice's errands", type="task")
        alice.add(alice_words[0], type="fact", parent=t)
        alice.checkpoint("alice checkpoint Quillhaven")
        u = bob.add("Bob's preferences", type="task")
        bob.add(bob_words[0], type="preference", parent=u)
        assert alice.admin.erase_namespace() == 2
        assert alice.nodes() == [] and alice.admin.stats().live == 0
        assert alice.recover().last_checkpoint is None
        assert [n.content for n in bob.nodes()][1] == bob_words[0]
        assert bob.admin.verify().clean
        # The emptied namespace is usable again.
        alice.add("a new start", type="task")
    assert _leaks(list(_files(folder)), [*alice_words, "alice checkpoint Quillhaven"]) == []
    assert _leaks([folder / "memory.db"], bob_words)


def test_erase_needs_the_admin_role(open_memory: OpenMemory, stores: Stores,
                                    embedder: SentenceTransformerEmbedder) -> None:
    mem = open_memory()
    node = mem.add("keep me", type="task")
    w = stores.open(mem.folder, namespace="t", role="write", embedder=embedder)  # type: ignore[arg-type]
    try:
        with pytest.raises(AccessDeniedError, match="admin"):
            w.admin.erase(node.id)
        with pytest.raises(AccessDeniedError):
            w.admin.erase_namespace()
    finally:
        w.close()
    assert mem.get(node.id).content == "keep me"


# -- roles -------------------------------------------------------------------------------------


def test_a_read_only_handle_reads_and_changes_nothing(open_memory: OpenMemory, stores: Stores,
                                                     embedder: SentenceTransformerEmbedder) -> None:
    mem = open_memory()
    ids = _fill(mem)
    mem.close()
    reader = stores.open(mem.folder, namespace="t", role="read", embedder=embedder)  # type: ignore[arg-type]
    try:
        before = [(n.id, n.version, n.status) for n in reader.nodes(include_archived=True)]
        assert reader.get(ids["s0"]).content == SECRETS[0]
        assert reader.retrieve("passport", k=2).nodes
        assert reader.admin.stats().live == 4
        calls = [
            lambda: reader.add("x", type="fact"),
            lambda: reader.add_many([{"content": "x", "type": "fact"}]),
            lambda: reader.update(ids["s0"], content="changed"),
            lambda: reader.feedback(ids["s0"], important=True),
            lambda: reader.pin(ids["s0"]),
            lambda: reader.move(ids["s0"], ROOT),
            lambda: reader.focus(ids["s0"]),
            lambda: reader.checkpoint("x"),
            lambda: reader.archive(ids["s0"]),
            lambda: reader.unarchive(ids["s0"]),
            lambda: reader.rewind(seq=1),
            lambda: reader.delete(ids["s0"]),
            lambda: reader.forget(max_nodes=1),
            lambda: reader.admin.erase(ids["s0"]),
            lambda: reader.admin.import_(mem.folder / "none.jsonl"),  # type: ignore[operator]
            lambda: reader.admin.reindex(),
            lambda: reader.admin.repair(),
        ]
        for call in calls:
            with pytest.raises(AccessDeniedError):
                call()
        assert [(n.id, n.version, n.status) for n in reader.nodes(include_archived=True)] == before
    finally:
        reader.close()


def test_a_write_handle_writes_but_does_not_administer(open_memory: OpenMemory, stores: Stores,
                                                      embedder: SentenceTransformerEmbedder) -> None:
    mem = open_memory()
    task = mem.add("a task", type="task")
    mem.close()
    w = stores.open(mem.folder, namespace="t", role="write", embedder=embedder)  # type: ignore[arg-type]
    try:
        fact = w.add("a fact", type="fact", parent=task.id)
        w.archive(fact)
        w.unarchive(fact.id)
        for call in (lambda: w.rewind(seq=1), lambda: w.admin.reindex(), lambda: w.admin.erase_namespace()):
            with pytest.raises(AccessDeniedError):
                call()
        assert len(w.nodes()) == 2
    finally:
        w.close()
    with pytest.raises(InvalidInputError, match="role"):
        stores.open(mem.folder, namespace="t", role="owner", embedder=embedder)  # type: ignore[arg-type]


# -- limits -------------------------------------------------------------------------------------


def test_depth_and_fanout_limits_refuse_the_whole_write(open_memory: OpenMemory) -> None:
    mem = open_memory(write={"max_depth": 3, "max_children": 4}, dedup={"enabled": False})
    task = mem.add("root task", type="task")
    chain = task
    levels = []
    for i in range(3):
        chain = mem.add(f"level {i + 1}", type="event", parent=chain)
        levels.append(chain)
    assert chain.depth == 3
    with pytest.raises(InvalidInputError, match="max_depth"):
        mem.add("too deep", type="event", parent=chain)
    kids = [mem.add(f"child {i}", type="fact", parent=task) for i in range(2)]
    seq = mem.admin.stats().log_seq
    n = len(mem.nodes())
    with pytest.raises(InvalidInputError, match="max_children"):
        mem.add_many([{"content": f"wide {i}", "type": "fact", "parent": task.id} for i in range(3)])
    assert len(mem.nodes()) == n and mem.admin.stats().log_seq == seq
    with pytest.raises(InvalidInputError, match="max_depth"):
        mem.move(levels[0], kids[0])  # its subtree would reach depth 4
    assert mem.get(levels[0].id).parent_id == task.id
    moved = mem.move(levels[1], kids[0])  # depth 2 again: allowed
    assert moved.depth == 2 and mem.get(chain.id).depth == 3


def test_erase_namespace_empties_every_table_on_both_backends(open_memory: OpenMemory) -> None:
    """Every table but the audit trail holds no row of the erased namespace; the other
    namespace's rows are all still there; its vectors too."""
    from sqlalchemy import func, select

    from hybrid_memory.store.schema import checkpoints, cursors, nodes, oplog, outbox, terms

    gone = _audited(open_memory, namespace="gone")
    stay = open_memory(namespace="stay")
    _fill(gone)
    kept = _fill(stay)
    tables = (nodes, terms, oplog, outbox, cursors, checkpoints)

    def counts(ns: str) -> list[int]:
        with gone.store.reading() as conn:
            return [int(conn.execute(select(func.count()).select_from(t).where(t.c.namespace == ns)).scalar_one())
                    for t in tables]

    stay_before = counts("stay")
    assert min(counts("gone")[:4] + counts("gone")[5:]) > 0
    assert gone.admin.erase_namespace() == 4
    assert counts("gone") == [0] * len(tables)
    assert counts("stay")[:2] + counts("stay")[4:] == stay_before[:2] + stay_before[4:]
    assert stay.get(kept["s1"]).content == SECRETS[1]
    assert gone.index.ids("gone") == set()
    assert stay.admin.verify().clean
    assert verify_audit(gone.store).ok


def test_time_travel_and_an_altered_log_entry_in_an_encrypted_memory(
        tmp_path: Path, embedder: SentenceTransformerEmbedder, clock: Clock) -> None:
    """Replay reads the sealed log: a time travel brings an updated content back; a log
    payload altered on disk reads as a corrupt entry (found by verify), not as garbage."""
    ring = Keyring([generate_key()])
    with _open(tmp_path / "m", embedder, clock, key=ring) as mem:
        ids = _fill(mem)
        seq = mem.admin.stats().log_seq
        mem.update(ids["s0"], content="rewritten Wombatfield")
        mem.rewind(seq=seq)
        assert mem.get(ids["s0"]).content == SECRETS[0]
        assert ids["s0"] in [s.node.id for s in mem.retrieve("passport E98127734", k=3).nodes]
        last = mem.admin.stats().log_seq
    con = sqlite3.connect(tmp_path / "m" / "memory.db")
    (value,) = con.execute("SELECT payload FROM hm_oplog WHERE seq = ?", (last,)).fetchone()
    con.execute("UPDATE hm_oplog SET payload = ? WHERE seq = ?", (value[:-3] + "AAA", last))
    con.commit()
    con.close()
    with _open(tmp_path / "m", embedder, clock, key=ring) as mem:
        assert last in mem.admin.verify().corrupt_log
        assert mem.get(ids["s1"]).content == SECRETS[1]
    assert _leaks(list(_files(tmp_path / "m")), [*SECRETS, "rewritten Wombatfield"]) == []


def test_rotation_runs_while_another_handle_writes(tmp_path: Path, embedder: SentenceTransformerEmbedder,
                                                  clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """rotate_key in small transactions in one thread while a handle holding both keys
    adds memories in another: nothing is lost, everything ends under the new key."""
    import threading

    from hybrid_memory import safety

    monkeypatch.setattr(safety, "_CHUNK", 7)
    a, b = generate_key(), generate_key()
    folder = tmp_path / "m"
    with _open(folder, embedder, clock, key=Keyring([a])) as mem:
        task = mem.add("Rotation drill", type="task")
        mem.add_many([{"content": f"old memory {i} about Quokkaville", "type": "fact", "parent": task.id}
                      for i in range(60)])
    store = SqlStore(f"sqlite:///{folder / 'memory.db'}", keyring=Keyring([b, a]), check_keys=False)
    errors: list[BaseException] = []

    def rotate() -> None:
        try:
            safety.rotate_key(store)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    written = []
    with _open(folder, embedder, clock, key=Keyring([b, a])) as mem:
        worker = threading.Thread(target=rotate)
        worker.start()
        while worker.is_alive() or len(written) < 5:
            written.append(mem.add(f"new memory {len(written)} about Wombatfield", type="fact", parent=task.id).id)
        worker.join()
    store.close()
    assert errors == []
    with _open(folder, embedder, clock, key=Keyring([b])) as mem:
        contents = {n.content for n in mem.nodes()}
        assert {f"old memory {i} about Quokkaville" for i in range(60)} <= contents
        assert all(mem.get(i).content.startswith("new memory") for i in written)
    check = SqlStore(f"sqlite:///{folder / 'memory.db'}", keyring=Keyring([b]))
    try:
        assert all(n == total for n, total in sealed_share(check).values())
    finally:
        check.close()

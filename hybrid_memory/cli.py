"""The ``hybrid-memory`` command: a thin layer over MemoryTree, one method per command."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from . import safety
from .config import Config
from .crypto import Keyring, generate_key
from .errors import ConfigError, HybridMemoryError, InvalidInputError
from .ids import short_id
from .model import Drift, Node, path_ids, tree_order
from .portability import describe, recent_ops
from .store.schema import audit
from .store.sql import SqlStore
from .tree import MemoryTree
from .writing import ROOT


def _open(args: argparse.Namespace) -> MemoryTree:
    config = Config.load(args.config, overrides={"embedding": {"model": args.model}}) if args.model else args.config
    return MemoryTree.open(
        args.path, namespace=args.namespace, session=args.session, config=config,
        store=args.db_url or None, chroma_url=args.chroma_url or None,
        key=Keyring.from_file(args.key_file) if args.key_file else None,
    )


def _open_store(args: argparse.Namespace, keyring: Keyring | None = None, *, check_keys: bool = True) -> SqlStore:
    """The relational store alone (no model, no index): for store-wide commands."""
    if args.db_url:
        return SqlStore(args.db_url, keyring=keyring, check_keys=check_keys)
    db = os.path.join(args.path, "memory.db")
    if not os.path.isfile(db):
        raise InvalidInputError(f"no memory at {args.path} (no memory.db there)")
    return SqlStore(f"sqlite:///{os.path.abspath(db)}", keyring=keyring, check_keys=check_keys)


def _clip(text: str, n: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _resolve(mem: MemoryTree, ref: str) -> str:
    """A full id, or a unique prefix or suffix of one (``tree`` prints the last eight
    digits: ids begin with their time, so memories of one minute share a prefix)."""
    matches = [n.id for n in mem.nodes(include_archived=True) if n.id.startswith(ref) or n.id.endswith(ref)]
    if len(matches) == 1:
        return matches[0]
    return ref  # let the library raise NotFoundError (or NamespaceError) for it


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {k: _jsonable(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "value") and not isinstance(value, (int, float, str)):
        return value.value
    return value


def _print_json(value: Any) -> None:
    print(json.dumps(_jsonable(value), ensure_ascii=False, indent=2))


def _node_line(mem: MemoryTree, n: Node, now: float) -> str:
    flags = " pinned" if n.pinned else ""
    flags += " archived" if not n.live else ""
    return f"{short_id(n.id)} [{n.type.value}] {_clip(n.content)}  w={mem.weight(n, now):.2f}{flags}"


def cmd_add(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        parent: Any = ROOT if args.root else (_resolve(mem, args.parent) if args.parent else None)
        meta = json.loads(args.meta) if args.meta else None
        node = mem.add(
            args.content, type=args.type, parent=parent, importance=args.importance,
            confidence=args.confidence, meta=meta, pinned=args.pin,
        )
        if args.json:
            _print_json(node)
        else:
            verb = "merged into" if node.merged else "added"
            print(f"{verb} {node.id} [{node.type.value}] under {node.parent_id or '(root)'}")
    return 0


def cmd_retrieve(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        recall = mem.retrieve(args.query, k=args.k, budget_tokens=args.budget, branches=args.branches)
        if args.json:
            _print_json(recall)
            return 0
        if args.explain:
            print(recall.explain())
            print()
        print(recall.context if recall.context else "(nothing found)")
    return 0


def cmd_tree(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        nodes = mem.nodes(include_archived=args.all)
        active = mem.active
        now = time.time()
        if args.json:
            _print_json([dict(_jsonable(n), weight=mem.weight(n, now)) for n in nodes])
            return 0
        if not nodes:
            print("(empty)")
            return 0
        active_path = set(path_ids(active.path)) if active else set()
        children: dict[str | None, list[Node]] = {}
        ids = {n.id for n in nodes}
        for n in tree_order(nodes):
            children.setdefault(n.parent_id if n.parent_id in ids else None, []).append(n)

        # Depth first with a stack of its own (a tree may be deeper than Python's recursion).
        stack: list[tuple[str | None, str, int]] = [(None, "", 0)]
        while stack:
            parent, prefix, i = stack.pop()
            kids = children.get(parent, [])
            if i >= len(kids):
                continue
            n, last = kids[i], i == len(kids) - 1
            mark = "*" if n.id in active_path else " "
            branch = "" if parent is None else ("└── " if last else "├── ")
            print(f"{prefix}{branch}{mark}{_node_line(mem, n, now)}")
            stack.append((parent, prefix, i + 1))
            stack.append((n.id, prefix + ("" if parent is None else ("    " if last else "│   ")), 0))
        print(f"\n* active path ({short_id(active.id)})" if active else "\n(no active node)")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        s = mem.stats()
        if args.json:
            _print_json(s)
            return 0
        print(f"namespace        {s.namespace}")
        print(f"nodes            {s.live} live, {s.archived} archived")
        print(f"depth            {s.depth}")
        print("by type          " + (", ".join(f"{k} {v}" for k, v in sorted(s.by_type.items())) or "-"))
        print("active path      " + (" > ".join(short_id(i) for i in s.active_path) or "-"))
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.last_checkpoint_at)) if s.last_checkpoint_at else "-"
        print(f"last checkpoint  {when}")
        print(f"operations       {s.log_seq}")
        print("on disk          " + ("-" if s.disk_bytes is None else f"{s.disk_bytes / 1024:.1f} KiB (the whole store)"))
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        r = mem.recover()
        if args.json:
            _print_json(r)
            return 0
        print(f"replayed index operations  {r.replayed}")
        print(f"live nodes                 {r.live_nodes}")
        if r.active is None:
            print("active                     (none)")
        else:
            print("active path                " + " > ".join(_clip(n.content, 30) for n in r.path))
            print(f"active node                {r.active.id} [{r.active.type.value}] {_clip(r.active.content)}")
        print(f"latest state               {_clip(r.state.content) if r.state else '-'}")
        cp = r.last_checkpoint
        if cp is not None:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(cp.ts))
            print(f"last checkpoint            {when} (log #{cp.log_seq}{', ' + cp.note if cp.note else ''})")
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        report = mem.forget(threshold=args.threshold, max_nodes=args.max_nodes, delete=args.delete, dry_run=args.dry_run)
        if args.json:
            _print_json(report)
            return 0
        verb = "would forget" if report.dry_run else ("deleted" if args.delete else "archived")
        print(f"{verb} {len(report.details)} of {report.live_before} live nodes; {report.live_after} remain")
        for node_id, w in report.details:
            print(f"  {short_id(node_id)}  w={w:.3f}")
    return 0


def cmd_focus(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        node = mem.focus(_resolve(mem, args.node))
        print(f"active: {node.id} [{node.type.value}] {_clip(node.content)}")
    return 0


def cmd_checkpoint(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        cp = mem.checkpoint(args.note)
        print(f"checkpoint {cp.id} at log #{cp.log_seq}, active {cp.active_id or '-'}")
    return 0


# -- portability: export, import, restore, log ---------------------------------------------


def _parse_when(value: str) -> float:
    """Seconds since the epoch, or an ISO date-time (local time when it has no zone)."""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise InvalidInputError(f"--as-of takes seconds since the epoch or an ISO date-time, got {value!r}") from None


def cmd_export(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        t = mem.export(args.file, include_log=args.include_log)
    if args.json:
        _print_json(t)
    else:
        log = f", {t.ops} log entries" if args.include_log else ""
        print(f"exported {t.nodes} nodes, {t.cursors} cursors, {t.checkpoints} checkpoints{log} to {t.path}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        t = mem.import_(args.file)
    if args.json:
        _print_json(t)
    else:
        again = f" ({t.reembedded} embedded again)" if t.reembedded else ""
        print(f"imported {t.nodes} nodes{again}, {t.cursors} cursors, {t.checkpoints} checkpoints, "
              f"{t.ops} log entries from {t.path}")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    as_of = _parse_when(args.as_of) if args.as_of is not None else None
    with _open(args) as mem:
        if args.node is not None:
            if args.seq is not None or as_of is not None:
                raise InvalidInputError("restore: give a node, --seq or --as-of, not several")
            node = mem.unarchive(_resolve(mem, args.node))
            if args.json:
                _print_json(node)
            else:
                print(f"restored {node.id} [{node.type.value}] {_clip(node.content)}")
            return 0
        r = mem.rewind(seq=args.seq, as_of=as_of)
    if args.json:
        _print_json(r)
        return 0
    print(f"restored the memory to log #{r.seq} (it was at #{r.previous_seq}): {len(r.changed)} changed, "
          f"{len(r.added)} brought back, {len(r.removed)} removed")
    if r.erased:
        print(f"{len(r.erased)} node(s) erased since stay gone: " + ", ".join(short_id(i) for i in r.erased[:10]))
    print(f"undo with: rewind --seq {r.previous_seq}")
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 1_000_000:
        raise InvalidInputError(f"-n must be between 1 and 1000000, got {args.limit}")
    with _open(args) as mem:
        ops = recent_ops(mem, args.limit)
    if args.json:
        _print_json([dict(seq=o.seq, session=o.session, ts=o.ts, op=o.op, node_id=o.node_id,
                          payload=o.payload, summary=describe(o)) for o in ops])
        return 0
    if not ops:
        print("(no operations)")
    for o in ops:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(o.ts))
        print(f"#{o.seq:<6} {when}  {o.op:<11} {short_id(o.node_id) if o.node_id else '-':<8}  {describe(o)}")
    return 0


def _add_portability_commands(sub: Any) -> None:
    e = sub.add_parser("export", help="write a portable snapshot file",
                       description="Write the namespace as JSON Lines: nodes with their embeddings, "
                                   "cursors, checkpoints and (with --include-log) the operation log.")
    e.add_argument("file", metavar="PATH", help="the file to write (replaced atomically)")
    e.add_argument("--include-log", action="store_true", help="also write the operation log")
    e.set_defaults(func=cmd_export)

    i = sub.add_parser("import", help="load a snapshot into an empty memory",
                       description="Load a file written by export into this namespace, which must be empty; "
                                   "every line is checked first, then one transaction writes it all.")
    i.add_argument("file", metavar="PATH", help="a file written by export")
    i.set_defaults(func=cmd_import)

    r = sub.add_parser("restore", help="restore an archived node, or travel back in time",
                       description="With NODE: bring an archived node back. With --seq or --as-of: bring the "
                                   "whole memory back to that point of its operation log (erased nodes stay gone).")
    r.add_argument("node", nargs="?", help="archived node id or unique prefix")
    g = r.add_mutually_exclusive_group()
    g.add_argument("--seq", type=int, default=None, help="operation-log position to go back to (see: log)")
    g.add_argument("--as-of", default=None, help="a time: seconds since the epoch or an ISO date-time")
    r.set_defaults(func=cmd_restore)

    u = sub.add_parser("unarchive", help="bring an archived node back",
                       description="Bring an archived node back, with its archived ancestors and what was "
                                   "archived with it (the same as restore NODE).")
    u.add_argument("node", help="archived node id or unique prefix")
    u.set_defaults(func=cmd_restore, seq=None, as_of=None)

    w = sub.add_parser("rewind", help="bring the whole memory back to a point of its log",
                       description="Bring the whole memory back to a position of its operation log, or to where it "
                                   "stood at a time, in one transaction (erased nodes stay gone; the same as "
                                   "restore --seq / --as-of).")
    wg = w.add_mutually_exclusive_group(required=True)
    wg.add_argument("--seq", type=int, default=None, help="operation-log position to go back to (see: log)")
    wg.add_argument("--as-of", default=None, help="a time: seconds since the epoch or an ISO date-time")
    w.set_defaults(func=cmd_restore, node=None)

    lg = sub.add_parser("log", help="recent operations",
                        description="Print the most recent operations: position, time, operation, node, summary.")
    lg.add_argument("-n", dest="limit", type=int, default=20, help="how many operations (default 20)")
    lg.set_defaults(func=cmd_log)


def _print_drift(drift: Drift, *, verb: str) -> None:
    print(f"missing vectors      {len(drift.missing)}")
    print(f"vectors of archived or deleted nodes  {len(drift.extra)}")
    print(f"stale vectors        {len(drift.stale)}")
    print(f"pending index work   {drift.pending}")
    print(f"vectors out of context  {len(drift.out_of_context)}")
    print(f"corrupt log entries  {len(drift.corrupt_log)}")
    print(f"miscounted terms     {drift.term_counts}")
    print(verb)


def cmd_verify(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        drift = mem.verify()
        if args.json:
            _print_json(drift)
        else:
            _print_drift(drift, verb="the index matches the store" if drift.clean else "drift found: run repair")
    return 0 if drift.clean else 1


def cmd_repair(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        drift = mem.repair()
        after = mem.verify()
        if args.json:
            _print_json({"found": drift, "clean_after": after.clean})
        else:
            _print_drift(drift, verb="repaired" if after.clean else "still drifting: run reindex")
    return 0 if after.clean else 1


def cmd_reindex(args: argparse.Namespace) -> int:
    with _open(args) as mem:
        written = mem.reindex(progress=sys.stderr.isatty())
        print(f"reindexed {written} live nodes")
    return 0


def _add_index_commands(sub: Any) -> None:
    v = sub.add_parser("verify", help="compare the vector index with the store",
                       description="Report drift between the vector index and the relational store (exit 1 on drift).")
    v.set_defaults(func=cmd_verify)
    rp = sub.add_parser("repair", help="make the vector index match the store",
                        description="Replay pending index work, fix missing, stale and extra vectors, mark corrupt log entries.")
    rp.set_defaults(func=cmd_repair)
    ri = sub.add_parser("reindex", help="rebuild the vector index from the store",
                        description="Drop this namespace's vectors and rebuild them from the stored embeddings.")
    ri.set_defaults(func=cmd_reindex)


def cmd_keygen(args: argparse.Namespace) -> int:
    print(generate_key())
    return 0


def cmd_rotate_key(args: argparse.Namespace) -> int:
    config = Config.load(args.config) if args.config else Config.load()
    folder = None if args.db_url else os.path.abspath(args.path)
    old = Keyring.resolve(None, args.key_file or config.security.key_file or None,
                          data_dir=None if folder is None else Path(folder))
    new = Keyring.resolve(None, args.new_key_file, data_dir=None if folder is None else Path(folder))
    assert new is not None
    store = _open_store(args, new.then(old), check_keys=False)
    try:
        done = safety.rotate_key(store, progress=_bar("rotate-key") if sys.stderr.isatty() else None)
    finally:
        store.close()
    if args.json:
        _print_json(done)
    else:
        print(f"resealed under key {done.key_id}: {done.nodes} nodes, {done.log_entries} log entries, "
              f"{done.checkpoints} checkpoints; the old key can now be removed")
    return 0


def _bar(desc: str) -> Any:
    from tqdm import tqdm

    bar = tqdm(desc=desc, unit="row", file=sys.stderr)

    def report(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    return report


def cmd_audit(args: argparse.Namespace) -> int:
    if not 1 <= args.n <= 1_000_000:
        raise InvalidInputError(f"-n must be between 1 and 1000000, got {args.n}")
    store = _open_store(args, check_keys=False)  # the audit trail holds nothing sealed
    try:
        if args.action == "verify":
            check = safety.verify_audit(store)
            if args.json:
                _print_json(check)
            elif check.ok:
                print(f"audit trail intact: {check.entries} entries, head {check.head}")
            else:
                print(f"audit trail BROKEN at entry {check.bad_seq}: {check.reason} "
                      f"({check.entries} entries checked before it)")
            return 0 if check.ok else 1
        from sqlalchemy import select

        with store.reading() as conn:
            q = select(audit).where(audit.c.namespace == args.namespace).order_by(audit.c.seq.desc()).limit(args.n)
            rows = list(conn.execute(q))[::-1]
        if args.json:
            _print_json([dict(r._mapping) for r in rows])
        for r in [] if args.json else rows:
            when = datetime.fromtimestamp(r.ts).strftime("%Y-%m-%d %H:%M:%S")
            ids = json.loads(r.node_ids)
            shown = " ".join(short_id(i) for i in ids[:5]) + (f" +{len(ids) - 5}" if len(ids) > 5 else "")
            print(f"{r.seq:>6}  {when}  {r.actor:<12} {r.action:<10} {shown}")
        return 0
    finally:
        store.close()


def cmd_erase(args: argparse.Namespace) -> int:
    if (args.node is None) == (not args.all):
        raise InvalidInputError("erase: give a node id, or --all for the whole namespace")
    with _open(args) as mem:
        if args.all:
            n = mem.erase_namespace(compact=not args.no_compact)
            print(f"erased namespace {mem.namespace!r}: {n} nodes")
        else:
            ids = mem.erase(_resolve(mem, args.node), compact=not args.no_compact)
            print(f"erased {len(ids)} nodes")
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    store = _open_store(args, check_keys=False)
    try:
        safety.compact(store)
    finally:
        store.close()
    print("compacted")
    return 0


def _keys_path(args: argparse.Namespace) -> str:
    return args.keys or os.environ.get("HYBRID_MEMORY_API_KEYS") or os.path.join(args.path, "api-keys.json")


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from .server.app import create_app
        from .server.keys import KeyFile
    except ImportError as exc:
        raise ConfigError(f"the service needs its extra: pip install 'hybrid-memory[server]' ({exc})") from None
    keys = KeyFile(_keys_path(args))
    if not len(keys):
        raise ConfigError(f"no API keys in {keys.path}: make one with `hybrid-memory apikey add --namespace NS`")
    config = Config.load(args.config) if args.config else Config.load()
    if args.log_json:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(message)s")
    app = create_app(keys=keys, path=None if args.db_url and args.chroma_url else args.path, store=args.db_url or None,
                     chroma_url=args.chroma_url or None, config=config,
                     key=Keyring.from_file(args.key_file) if args.key_file else None, log_json=args.log_json)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info" if args.log_json else "warning")
    return 0


def cmd_apikey(args: argparse.Namespace) -> int:
    from .server.keys import KeyFile

    keys = KeyFile(_keys_path(args))
    if args.action == "add":
        key = keys.add(args.namespace, args.role, args.label or "")
        print(key)
        print(f"(namespace {args.namespace!r}, role {args.role}; stored hashed in {keys.path}: "
              "this is the only time the key is shown)", file=sys.stderr)
    elif args.action == "list":
        for k in keys.entries():
            print(f"{k.id}  {k.role:<5}  {k.namespace}  {k.label}")
    else:
        if not args.id:
            raise InvalidInputError("apikey revoke: give the key's id (see apikey list)")
        if not keys.revoke(args.id):
            raise InvalidInputError(f"no API key with id {args.id!r}")
        print(f"revoked {args.id}")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from .mcp_server import main as mcp_main
    except ImportError as exc:
        raise ConfigError(f"the MCP server needs its extra: pip install 'hybrid-memory[mcp]' ({exc})") from None
    argv = ["--path", args.path, "--namespace", args.namespace, "--session", args.session, "--role", args.role]
    for flag, value in (("--config", args.config), ("--model", args.model), ("--db-url", args.db_url),
                        ("--chroma-url", args.chroma_url), ("--key-file", args.key_file)):
        if value:
            argv += [flag, str(value)]
    return mcp_main(argv)


def _add_service_commands(sub: Any) -> None:
    mc = sub.add_parser("mcp", help="serve the memory to MCP clients over stdio",
                        description="An MCP server over stdio (pip install 'hybrid-memory[mcp]'): tools remember, "
                                    "recall, focus, feedback, forget, checkpoint, recover, stats.")
    mc.add_argument("--role", choices=("read", "write", "admin"), default="write",
                    help="what the client may do (default write)")
    mc.set_defaults(func=cmd_mcp)
    sv = sub.add_parser("serve", help="run the HTTP service (and the tree inspector page)",
                        description="Serve the memory over HTTP (FastAPI; pip install 'hybrid-memory[server]'): "
                                    "the /v1 API, OpenAPI at /docs, metrics at /metrics, the tree inspector at /.")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8080)
    sv.add_argument("--keys", help="API key file (default: $HYBRID_MEMORY_API_KEYS or PATH/api-keys.json)")
    sv.add_argument("--log-json", action="store_true", help="log retrievals and weight changes as JSON lines")
    sv.set_defaults(func=cmd_serve)
    ak = sub.add_parser("apikey", help="make, list or revoke API keys of the service",
                        description="add: print a new key bound to --namespace with --role (stored hashed); "
                                    "list: the keys' ids, roles and namespaces; revoke ID.")
    ak.add_argument("action", choices=("add", "list", "revoke"))
    ak.add_argument("id", nargs="?", help="the key id to revoke")
    ak.add_argument("--role", choices=("read", "write", "admin"), default="write")
    ak.add_argument("--label", help="a note kept with the key")
    ak.add_argument("--keys", help="API key file (default: $HYBRID_MEMORY_API_KEYS or PATH/api-keys.json)")
    ak.set_defaults(func=cmd_apikey)


def _add_safety_commands(sub: Any) -> None:
    k = sub.add_parser("keygen", help="print a new encryption key",
                       description="Print a new random AES-256 key (base64). Keep it in a file outside the memory's folder.")
    k.set_defaults(func=cmd_keygen)
    rk = sub.add_parser("rotate-key", help="reseal the memory under a new key",
                        description="Reseal every stored content, log payload and note under the key in --new-key-file "
                                    "(the current key comes from --key-file, $HYBRID_MEMORY_KEY or $HYBRID_MEMORY_KEY_FILE; "
                                    "none for a memory not yet encrypted). Runs in short transactions: handles that hold "
                                    "both keys keep working.")
    rk.add_argument("--new-key-file", required=True, help="file holding the new key")
    rk.set_defaults(func=cmd_rotate_key)
    au = sub.add_parser("audit", help="check or show the audit trail",
                        description="verify: walk the hash chain of the audit trail (exit 1 if broken); "
                                    "show: the namespace's latest entries.")
    au.add_argument("action", choices=("verify", "show"))
    au.add_argument("-n", type=int, default=20, help="entries to show")
    au.set_defaults(func=cmd_audit)
    er = sub.add_parser("erase", help="erase a subtree or the whole namespace everywhere",
                        description="Delete a node's subtree (or with --all the namespace) from every table, the vector "
                                    "index and the log, then compact the store so no bytes of it stay on disk.")
    er.add_argument("node", nargs="?", help="node id or unique prefix")
    er.add_argument("--all", action="store_true", help="erase the whole namespace")
    er.add_argument("--no-compact", action="store_true", help="leave the compaction to `hybrid-memory compact`")
    er.set_defaults(func=cmd_erase)
    cp = sub.add_parser("compact", help="rewrite the store's files (after erasures; lays a large memory's "
                                        "indexes out in order for a cold forget pass)",
                        description="SQLite: VACUUM and truncate the WAL; PostgreSQL: VACUUM FULL.")
    cp.set_defaults(func=cmd_compact)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hybrid-memory",
        description="Inspect and edit a hybrid_memory weighted memory tree.",
    )
    p.add_argument("--path", default=os.environ.get("HYBRID_MEMORY_PATH", "./memory"),
                   help="memory folder (default: $HYBRID_MEMORY_PATH or ./memory)")
    p.add_argument("--namespace", "-n", default=os.environ.get("HYBRID_MEMORY_NAMESPACE", "default"),
                   help="tenant namespace (default: $HYBRID_MEMORY_NAMESPACE or 'default')")
    p.add_argument("--session", default="main", help="agent session whose active node is used")
    p.add_argument("--config", default=None, help="a TOML file merged over configs/default.toml")
    p.add_argument("--model", default=None,
                   help="embedding model, over the configuration's (a sentence-transformers name or path, "
                        "'bundled', 'use-multilingual'); it must be the one the memory was written with")
    p.add_argument("--db-url", default=os.environ.get("HYBRID_MEMORY_DB_URL"),
                   help="SQLAlchemy URL of the relational store instead of memory.db in --path "
                        "(default: $HYBRID_MEMORY_DB_URL)")
    p.add_argument("--chroma-url", default=os.environ.get("HYBRID_MEMORY_CHROMA_URL"),
                   help="Chroma server, e.g. http://127.0.0.1:8000, instead of chroma/ in --path "
                        "(default: $HYBRID_MEMORY_CHROMA_URL)")
    p.add_argument("--key-file", default=None,
                   help="file of the memory's encryption key(s) (default: $HYBRID_MEMORY_KEY, "
                        "$HYBRID_MEMORY_KEY_FILE, or security.key_file)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    a = sub.add_parser("add", help="write one memory", description="Write one memory under the active node (or --parent).")
    a.add_argument("content")
    a.add_argument("--type", "-t", required=True, help="task, state, event, fact, preference, decision or summary")
    g = a.add_mutually_exclusive_group()
    g.add_argument("--parent", "-p", help="parent node id (or unique prefix); default: the active node")
    g.add_argument("--root", action="store_true", help="start a new tree")
    a.add_argument("--importance", type=float)
    a.add_argument("--confidence", type=float)
    a.add_argument("--meta", help="JSON object of extra fields")
    a.add_argument("--pin", action="store_true", help="never forget this memory")
    a.set_defaults(func=cmd_add)

    r = sub.add_parser("retrieve", help="find the memories a query needs",
                       description="Locate the task branch by meaning, rank inside it, print the context.")
    r.add_argument("query", nargs="?", help="omit for the active task's context")
    r.add_argument("-k", type=int, default=None, help="nodes to rank in (default from config)")
    r.add_argument("--budget", type=int, default=None, help="token budget of the context")
    r.add_argument("--branches", type=int, default=None, help="how many branches to open at most")
    r.add_argument("--explain", action="store_true", help="show branch scores and every node's scores")
    r.set_defaults(func=cmd_retrieve)

    t = sub.add_parser("tree", help="print the tree with weights", description="Print the tree with each node's weight now.")
    t.add_argument("--all", action="store_true", help="include archived nodes")
    t.set_defaults(func=cmd_tree)

    s = sub.add_parser("stats", help="sizes and shape of the memory", description="Node counts, depth, active path, disk size.")
    s.set_defaults(func=cmd_stats)

    rc = sub.add_parser("recover", help="where things stand after a restart",
                        description="The active node, its path, the latest task state and the last checkpoint.")
    rc.set_defaults(func=cmd_recover)

    f = sub.add_parser("forget", help="prune low-weight leaves", description="Archive (or delete) low-weight leaves.")
    f.add_argument("--threshold", type=float, default=None)
    f.add_argument("--max-nodes", type=int, default=None)
    f.add_argument("--delete", action="store_true", help="delete instead of archiving")
    f.add_argument("--dry-run", action="store_true", help="show what would go, change nothing")
    f.set_defaults(func=cmd_forget)

    fo = sub.add_parser("focus", help="set the active node", description="Make a node the active one.")
    fo.add_argument("node", help="node id or unique prefix")
    fo.set_defaults(func=cmd_focus)

    c = sub.add_parser("checkpoint", help="record where the session stands", description="Write a checkpoint.")
    c.add_argument("--note")
    c.set_defaults(func=cmd_checkpoint)
    sub.add_parser("eval", help="measure retrieval against baselines (see hybrid-memory eval --help)",
                   description="The offline evaluation: replay a trace into hybrid_memory and the baselines "
                               "and report hit rate, tokens, latency, recovery and forgetting. "
                               "Its options: hybrid-memory eval --help.",
                   add_help=False)
    sub.add_parser("bench", help="benchmark speed and scale (see hybrid-memory bench --help)",
                   description="Benchmarks on generated traces: ingest, retrieval beside a bare Chroma query, "
                               "reopen, forget, memory and disk. Its options: hybrid-memory bench --help.",
                   add_help=False)
    _add_portability_commands(sub)  # portability
    _add_index_commands(sub)
    _add_safety_commands(sub)
    _add_service_commands(sub)
    return p


def run_eval(argv: Sequence[str], command: str = "eval") -> int:
    """``hybrid-memory eval ...`` and ``hybrid-memory bench ...``: the offline
    evaluation and the benchmarks, which live beside the package in the source tree
    (``eval/``), not inside it."""
    if "" not in sys.path and os.path.isfile(os.path.join("eval", "harness.py")):
        sys.path.insert(0, os.getcwd())  # a non-editable install run from the checkout
    try:
        entry = importlib.import_module("eval.bench" if command == "bench" else "eval.harness").main
    except ImportError:
        print(f"error [config_error]: hybrid-memory {command} runs from a source checkout of hybrid_memory "
              "(it needs the eval/ folder beside the package; run it from the checkout's top folder)",
              file=sys.stderr)
        return ConfigError.exit_code
    code: int = entry(list(argv), prog=f"hybrid-memory {command}")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for a in argv:
        try:
            a.encode("utf-8")
        except UnicodeEncodeError:
            print("error [invalid_input]: an argument is not valid UTF-8 text", file=sys.stderr)
            return InvalidInputError.exit_code
    if argv[:1] in (["eval"], ["bench"]):
        return run_eval(argv[1:], argv[0])
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except HybridMemoryError as exc:
        print(f"error [{exc.code}]: {exc}", file=sys.stderr)
        return exc.exit_code
    except json.JSONDecodeError as exc:
        print(f"error [invalid_input]: --meta is not valid JSON: {exc}", file=sys.stderr)
        return 2
    except RecursionError:
        print("error [invalid_input]: an argument is nested too deeply", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The argparse tree of ``hybrid-memory``: global options, then one function per
group of commands, each command bound to its ``cmd_*`` function."""

from __future__ import annotations

import argparse
import os
from typing import Any

from .commands_index import cmd_reindex, cmd_repair, cmd_verify
from .commands_ingest import cmd_ingest
from .commands_portability import cmd_export, cmd_import, cmd_log, cmd_restore
from .commands_read import cmd_recover, cmd_retrieve, cmd_stats, cmd_tree
from .commands_safety import cmd_audit, cmd_compact, cmd_erase, cmd_keygen, cmd_rotate_key
from .commands_service import cmd_apikey, cmd_mcp, cmd_serve
from .commands_write import (
    cmd_add,
    cmd_checkpoint,
    cmd_finish,
    cmd_focus,
    cmd_forget,
    cmd_place,
    cmd_summarize,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hybrid-memory",
        description="Inspect and edit a hybrid_memory weighted memory tree.",
    )
    _add_global_options(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_memory_commands(sub)
    _add_summary_and_ingest_commands(sub)
    _add_harness_commands(sub)
    _add_portability_commands(sub)
    _add_index_commands(sub)
    _add_safety_commands(sub)
    _add_service_commands(sub)
    return p


def _add_global_options(p: argparse.ArgumentParser) -> None:
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


def _add_memory_commands(sub: Any) -> None:
    a = sub.add_parser("add", help="write one memory", description="Write one memory under the active node (or --parent).")
    a.add_argument("content")
    a.add_argument("--type", "-t", required=True, help="task, state, event, fact, preference, decision or summary")
    g = a.add_mutually_exclusive_group()
    g.add_argument("--parent", "-p", help="parent node id (or unique prefix), or 'auto': the task branch the "
                                          "memory reads closest to; default: the active node")
    g.add_argument("--root", action="store_true", help="start a new tree")
    a.add_argument("--importance", type=float)
    a.add_argument("--confidence", type=float)
    a.add_argument("--meta", help="JSON object of extra fields")
    a.add_argument("--pin", action="store_true", help="never forget this memory")
    a.set_defaults(func=cmd_add)

    pl = sub.add_parser("place", help="where --parent auto would put a memory",
                        description="Say which task branch a memory of CONTENT would go under with --parent auto, "
                                    "and why (its score and the runner-up's). Writes nothing.")
    pl.add_argument("content")
    pl.set_defaults(func=cmd_place)

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


def _add_summary_and_ingest_commands(sub: Any) -> None:
    summaries = (
        ("summarize", "node", "NODE", "node id or unique prefix", cmd_summarize,
         "write a summary of what is under a node",
         "Write a summary node under NODE of the live memories below it (the default extractive summarizer: their "
         "weightiest, least redundant sentences) and print it. A new summary of NODE archives the one before."),
        ("finish", "task", "TASK", "task node id or unique prefix", cmd_finish,
         "mark a task finished and summarize it",
         "Mark TASK finished (its meta gets finished_at and summary_id) and write its summary, as summarize does; "
         "print the summary. A recall that cannot fit what it picked under a finished task shows the summary "
         "instead."),
    )
    for name, dest, metavar, what, func, help_, description in summaries:
        sp = sub.add_parser(name, help=help_, description=description)
        sp.add_argument(dest, metavar=metavar, help=what)
        sp.add_argument("--budget-tokens", type=int, default=None, metavar="N",
                        help="the summary's token budget (default: write.summary_tokens)")
        sp.set_defaults(func=func)

    ig = sub.add_parser("ingest", help="write a chat transcript or document into the memory",
                        description="Read FILE (OpenAI-style messages as JSON or JSON Lines, sessions with dates, "
                                    "or plain text) and write each session as a task and each message as an event "
                                    "under it, at its original time. A file that cannot be read is refused with its "
                                    "line, and nothing of it is written; what an earlier ingest of the same file "
                                    "wrote is not written again.")
    ig.add_argument("file", metavar="FILE")
    ig.add_argument("--format", choices=("auto", "messages", "sessions", "text"), default="auto",
                    help="how to read FILE (default: by its name and content)")
    ig.add_argument("--parent", "-p", help="node id (or unique prefix) to put the sessions under, or 'auto': the "
                                           "task branch each reads closest to; default: the top")
    ig.add_argument("--dry-run", action="store_true", help="print the tree it would write, write nothing")
    ig.set_defaults(func=cmd_ingest)


def _add_harness_commands(sub: Any) -> None:
    # main hands these to eval/ before parsing (run_eval): they are here for the help.
    sub.add_parser("eval", help="measure retrieval against baselines (see hybrid-memory eval --help)",
                   description="The offline evaluation: replay a trace into hybrid_memory and the baselines "
                               "and report hit rate, tokens, latency, recovery and forgetting. "
                               "Its options: hybrid-memory eval --help.",
                   add_help=False)
    sub.add_parser("bench", help="benchmark speed and scale (see hybrid-memory bench --help)",
                   description="Benchmarks on generated traces: ingest, retrieval beside a bare Chroma query, "
                               "reopen, forget, memory and disk. Its options: hybrid-memory bench --help.",
                   add_help=False)


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


def _add_service_commands(sub: Any) -> None:
    mc = sub.add_parser("mcp", help="serve the memory to MCP clients over stdio",
                        description="An MCP server over stdio (pip install 'hybrid-memory[mcp]'): tools remember, "
                                    "recall, focus, feedback, summarize, finish, ingest, forget, checkpoint, recover, stats.")
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

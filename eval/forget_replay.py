"""Replay a forgetting run offline under another forgetting policy.

    python -m eval --trace T --keep-memories runs/           # keeps runs/forget
    python -m eval.forget_replay --trace T --memory runs/forget
    python -m eval.forget_replay --trace T --memory runs/forget --recency 0.1 --half-life-days 2

The harness's forgetting run (a live-node cap, ``--forget-cap``) takes minutes: every
memory is written, every question asked. Which gold memories it loses depends only on
which leaves forgetting picks, so this module re-runs just that choice. It reads the
run's operation log (every add, merge, supersession, read, feedback and focus the
real run made, with their times) and replays it into plain arrays, applying the
policy under test at each of the run's forget passes, at its time (down to the cap,
and every leaf under the threshold), restoring what the run's agent went back to (a focus, a
feedback, a new child). A question's gold memories archived when it is asked are
counted as wrongly forgotten, as the harness counts them.

With the configuration the run used, the replay takes the same decisions as the run
(``tests/test_eval_harness.py`` checks the archived set node for node). Under
another policy the reads are still the run's own (retrieval would have returned
slightly different memories from a different live tree): a good estimate, seconds
instead of minutes, for choosing settings before a real run.
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_memory.config import Config
from hybrid_memory.evaluation.trace import read_trace
from hybrid_memory.forgetting import alone_shares, forgetting_weights, heading_factors, plan_forget
from hybrid_memory.weights import weight_array

#: (arrays, candidate rows, now) -> the forgetting weight of each candidate.
Policy = Callable[["Columns", np.ndarray[Any, Any], float], np.ndarray[Any, Any]]


class Columns:
    """The replayed memories as columns, one row per node in the order written."""

    def __init__(self, size: int) -> None:
        self.importance = np.zeros(size)
        self.confidence = np.zeros(size)
        self.accessed = np.zeros(size)
        self.touched = np.zeros(size)
        self.live = np.zeros(size, dtype=bool)
        self.children = np.zeros(size, dtype=np.int64)
        self.parent = np.full(size, -1, dtype=np.int64)
        #: A state that a later state of its branch supersedes.
        self.superseded_state = np.zeros(size, dtype=bool)
        self.ids: list[str] = [""] * size
        #: Each node's type (a NodeType value), for policies that weigh by kind.
        self.kind = np.full(size, "", dtype=object)
        #: Whether a child was ever written under the node.
        self.had_child = np.zeros(size, dtype=bool)


def library_policy(config: Config) -> Policy:
    """The library's forgetting weight over the replayed columns, as forget() takes it:
    hybrid_memory.weights.weight_array under forgetting_weights(config), superseded
    states at ``[forgetting] superseded``, and the heading factors."""
    f = config.forgetting
    cfg = forgetting_weights(config)

    def weigh(c: Columns, rows: np.ndarray[Any, Any], now: float) -> np.ndarray[Any, Any]:
        w = weight_array(importance=c.importance[rows], confidence=c.confidence[rows],
                         access_count=c.accessed[rows], touched_at=c.touched[rows], now=now, cfg=cfg)
        w = np.where(c.superseded_state[rows], w * f.superseded, w)
        task = c.kind == "task"
        empty = task & ((c.children > 0) | c.had_child)
        out: np.ndarray[Any, Any] = w * heading_factors(rows, c.parent, c.children, empty, task,
                                                         empty_task=f.empty_task, last_in_task=f.last_in_task)
        return out

    return weigh


@dataclass
class Result:
    #: Trace ids of the gold memories archived when their question was asked.
    lost: list[str]
    #: Gold memories checked (one per gold id per question).
    checked: int
    #: Node ids archived at the end of the replay.
    archived: set[str]

    @property
    def rate(self) -> float:
        return len(self.lost) / self.checked if self.checked else 0.0


def read_log(memory: Path, namespace: str) -> list[tuple[float, str, str, dict[str, Any]]]:
    """(ts, op, node id, payload) of the namespace's operation log, in order. The
    memory must be a plain SQLite one (a replay reads payloads, which a keyring seals)."""
    db = memory / "memory.db"
    if not db.is_file():
        raise FileNotFoundError(f"{db} does not exist: give the forget/ folder of a kept run")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT ts, op, node_id, payload FROM hm_oplog WHERE namespace = ? ORDER BY seq",
                           (namespace,)).fetchall()
    finally:
        con.close()
    return [(ts, op, node or "", json.loads(payload) if payload else {}) for ts, op, node, payload in rows]


def replay(events: Sequence[Mapping[str, Any]], log: Sequence[tuple[float, str, str, dict[str, Any]]],
           policy: Policy, *, cap: int, threshold: float, last_in_task: float = 1.0) -> Result:
    """Replay ``log`` (a forgetting run's operation log) under ``policy``, asking the
    questions of ``events`` (the trace) at their times. ``last_in_task``: what the
    planner applies to a memory a pass leaves alone under its task (``[forgetting]
    last_in_task`` for the library's policy; 1: nothing)."""
    adds = [p for _, op, _, p in log if op == "add"]
    node_of = {(p["content"], round(p["created_at"], 3)): p["id"] for p in adds}
    gold_node: dict[str, str] = {}
    for e in events:
        if e.get("op") == "add" and e.get("ts") is not None:
            found = node_of.get((e["content"], round(float(e["ts"]), 3)))
            if found:
                gold_node[e["id"]] = found
    queries = sorted((e for e in events if e.get("op") == "query"), key=lambda e: float(e.get("ts") or 0.0))
    c = Columns(len(adds))
    row: dict[str, int] = {}
    latest_state: dict[str, int] = {}
    focus = -1
    lost: list[str] = []
    checked = 0
    asked = 0
    n = 0

    def path(i: int) -> list[int]:
        out = []
        while i >= 0:
            out.append(i)
            i = int(c.parent[i])
        return out

    def restore(i: int) -> None:
        for a in path(i):
            if not c.live[a]:
                c.live[a] = True
                if c.parent[a] >= 0:
                    c.children[c.parent[a]] += 1

    def ask_until(ts: float) -> None:
        nonlocal asked, checked
        while asked < len(queries) and float(queries[asked].get("ts") or 0.0) < ts:
            for g in queries[asked].get("gold", ()):
                checked += 1
                i = row.get(gold_node.get(g, ""))
                if i is not None and not c.live[i]:
                    lost.append(g)
            asked += 1

    def forget(now: float) -> None:
        # The run calls forget() only when an add takes the tree past the cap; the
        # threshold then applies too. The library's planner decides, over the live
        # rows, with the active path kept.
        rows = np.flatnonzero(c.live[:n])
        if len(rows) <= cap:
            return
        keep = np.zeros(n, dtype=bool)
        if focus >= 0:
            keep[path(focus)] = True
        parents = [c.ids[p] if p >= 0 else None for p in c.parent[rows].tolist()]
        plan = plan_forget([c.ids[i] for i in rows.tolist()], parents, policy(c, rows, now).tolist(),
                           keep[rows].tolist(), threshold=threshold, max_nodes=cap,
                           alone=alone_shares(c.parent[rows], c.kind == "task", last_in_task))
        for node_id, _ in plan:
            i = row[node_id]
            c.live[i] = False
            if c.parent[i] >= 0:
                c.children[c.parent[i]] -= 1

    for ts, op, node_id, p in log:
        ask_until(ts)
        if op == "add":
            i = n
            n += 1
            row[node_id] = i
            c.ids[i] = node_id
            parent = row.get(p.get("parent_id") or "", -1)
            c.parent[i] = parent
            c.importance[i], c.confidence[i] = p["importance"], p["confidence"]
            c.touched[i] = p["created_at"]
            c.kind[i] = p["type"]
            if p["type"] == "state":
                if p["branch_id"] in latest_state:
                    c.superseded_state[latest_state[p["branch_id"]]] = True
                latest_state[p["branch_id"]] = i
            if parent >= 0 and not c.live[parent]:
                restore(parent)
            c.live[i] = True
            if parent >= 0:
                c.children[parent] += 1
                c.had_child[parent] = True
                for a in path(parent):
                    c.touched[a] = max(c.touched[a], ts)
            if p.get("focus"):
                focus = i
        elif op == "forget":
            # The run's pass, at its time: the harness forgets after each batch of
            # adds that takes the tree past the cap, and such a pass always archives.
            forget(ts)
        elif op in ("merge", "feedback") and node_id in row:
            i = row[node_id]
            if op == "feedback" and not c.live[i]:
                restore(i)
            c.importance[i] = p.get("importance", c.importance[i])
            c.confidence[i] = p.get("confidence", c.confidence[i])
            c.touched[i] = ts
        elif op == "supersede" and node_id in row:
            c.importance[row[node_id]] = p["importance"]
        elif op == "access":
            for k, (count, at) in p.get("counts", {}).items():
                if k in row:
                    c.accessed[row[k]] += count
                    c.touched[row[k]] = max(c.touched[row[k]], at)
        elif op == "focus" and node_id in row:
            focus = row[node_id]
            if not c.live[focus]:
                restore(focus)
            for a in path(focus):
                c.touched[a] = max(c.touched[a], ts)
    ask_until(math.inf)
    return Result(lost, checked, {c.ids[i] for i in range(n) if not c.live[i]})


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Replay a kept forgetting run under another forgetting policy.")
    p.add_argument("--trace", type=Path, required=True, help="the trace the run replayed")
    p.add_argument("--memory", type=Path, required=True, help="the run's forget/ folder (python -m eval --keep-memories)")
    p.add_argument("--namespace", default="default", help="the namespace to replay (default: default)")
    p.add_argument("--cap", type=int, help="live-node cap (default: the run's, half the trace's adds)")
    p.add_argument("--config", type=Path, help="a hybrid_memory TOML configuration (weights, forgetting)")
    p.add_argument("--recency", type=float, help="forgetting's recency coefficient instead of [forgetting] recency")
    p.add_argument("--half-life-days", type=float, help="forgetting's recency half-life in days, instead of [forgetting] half_life_s")
    return p


def main(argv: Sequence[str] | None = None, prog: str = "python -m eval.forget_replay") -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        config = Config.load(args.config)
        forgetting = config.forgetting
        if args.recency is not None:
            if args.recency < 0:
                raise ValueError("--recency must be >= 0")
            forgetting = replace(forgetting, recency=args.recency)
        if args.half_life_days is not None:
            if args.half_life_days <= 0:
                raise ValueError("--half-life-days must be positive")
            forgetting = replace(forgetting, half_life_s=args.half_life_days * 86400.0)
        config = replace(config, forgetting=forgetting)
        events = read_trace(args.trace)
        log = read_log(args.memory, args.namespace)
    except (ValueError, OSError, sqlite3.Error) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    adds = sum(1 for e in events if e.get("op") == "add")
    cap = args.cap if args.cap is not None else max(1, int(adds * 0.5))
    result = replay(events, log, library_policy(config),
                    cap=cap, threshold=config.forgetting.threshold, last_in_task=config.forgetting.last_in_task)
    print(f"cap {cap}: {len(result.lost)} of {result.checked} gold memories forgotten before their question "
          f"({result.rate:.3f}); {len(result.archived)} archived at the end")
    for g in result.lost:
        print(f"  {g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

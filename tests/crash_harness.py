"""Kill -9 trials: writer processes add, update and focus memories, reporting every
acknowledged write; the parent kills them with SIGKILL at a random moment, then
checks that the reopened memory lost nothing.

    .venv/bin/python tests/crash_harness.py --trials 300      # the long run
The test suite runs a shorter series (tests/test_crash.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

NAMESPACE = "crash"
WORDS = ["invoice", "server", "hotel", "报销", "发票", "迁移", "审批", "flight", "review", "短信"]


def writer(folder: str, seed: int) -> None:
    """Child: write until killed. Prints one JSON line before ('attempt') and after
    ('ack') every operation; an ack is printed only once the call returned."""
    import torch

    torch.set_num_threads(1)
    from hybrid_memory import ROOT, Config, MemoryTree, text

    rng = random.Random(seed)

    def say(**kw: Any) -> None:
        print(json.dumps(kw, ensure_ascii=False), flush=True)

    # all-MiniLM-L6-v2: the model the checking process opens the memory with.
    bundled = Config.load(overrides={"embedding": {"model": "bundled"}})
    with MemoryTree.open(folder, namespace=NAMESPACE, config=bundled) as mem:
        mem.embedder.embed(["warm up"])
        mem.index.ids(mem.namespace)  # the index client loads on first use: before the clock starts
        text.terms("预热 warm up")  # so does jieba's dictionary (most of a second), at the first Chinese word
        known = [n.id for n in mem.nodes()]
        say(ready=True)
        i = 0
        while True:
            i += 1
            roll = rng.random()
            if roll < 0.65 or not known:
                kind = "task" if not known or rng.random() < 0.15 else rng.choice(["event", "fact", "state"])
                content = f"{kind} {seed}-{i} {rng.choice(WORDS)} {rng.choice(WORDS)} {rng.randint(0, 10**9)}"
                parent = ROOT if kind == "task" and rng.random() < 0.5 else (rng.choice(known) if known else ROOT)
                say(attempt="add", content=content, type=kind)
                node = mem.add(content, type=kind, parent=parent)
                known.append(node.id)
                say(ack="add", id=node.id, content=node.content, merged=node.merged, type=kind)
            elif roll < 0.85:
                target = rng.choice(known)
                content = f"updated {seed}-{i} {rng.choice(WORDS)} {rng.randint(0, 10**9)}"
                say(attempt="update", id=target, content=content)
                mem.update(target, content=content)
                say(ack="update", id=target, content=content)
            else:
                target = rng.choice(known)
                say(attempt="focus", id=target)
                mem.focus(target)
                say(ack="focus", id=target)


@dataclass
class Trial:
    seed: int
    acked_adds: dict[str, str] = field(default_factory=dict)  # id -> content as added
    contents: dict[str, list[str]] = field(default_factory=dict)  # id -> acked contents, in order
    attempted: dict[str, list[str]] = field(default_factory=dict)  # id -> contents attempted after the last ack
    active_candidates: set[str] = field(default_factory=set)
    ops: int = 0
    killed_after_s: float = 0.0


def run_writer(folder: Path, seed: int, kill_after: float) -> Trial:
    """Start a writer, let it run ``kill_after`` seconds past ready, SIGKILL it."""
    trial = Trial(seed, killed_after_s=kill_after)
    proc = subprocess.Popen(
        [sys.executable, __file__, "--writer", str(folder), str(seed)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline: float | None = None
    pending_add: dict[str, Any] | None = None
    buffer = b""
    started = time.monotonic()
    killed = False
    while True:
        if not killed and deadline is not None and time.monotonic() >= deadline:
            proc.send_signal(signal.SIGKILL)
            # Keep reading to the end of the pipe: every line the writer printed
            # before it died (an attempt whose write committed, an ack) counts.
            killed = True
        if deadline is None and time.monotonic() - started > 300:
            proc.kill()
            raise RuntimeError(f"writer {seed} never became ready")
        ready, _, _ = select.select([fd], [], [], 0.01)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            if killed:
                break
            proc.wait()
            raise RuntimeError(f"writer {seed} exited by itself with {proc.returncode}")
        buffer += chunk
        *raw_lines, buffer = buffer.split(b"\n")
        lines = [raw.decode("utf-8") for raw in raw_lines]
        for line in lines:
            msg = json.loads(line)
            if msg.get("ready"):
                deadline = time.monotonic() + kill_after
            elif msg.get("attempt") == "add":
                pending_add = msg
                if msg["type"] == "task":
                    trial.active_candidates.add("<new task>")
            elif msg.get("attempt") == "update":
                trial.attempted.setdefault(msg["id"], []).append(msg["content"])
            elif msg.get("attempt") == "focus":
                trial.active_candidates.add(msg["id"])
            elif msg.get("ack") == "add":
                trial.ops += 1
                pending_add = None
                if not msg["merged"]:
                    trial.acked_adds[msg["id"]] = msg["content"]
                    trial.contents[msg["id"]] = [msg["content"]]
                if msg["type"] == "task":
                    trial.active_candidates.add(msg["id"])
            elif msg.get("ack") == "update":
                trial.ops += 1
                trial.contents.setdefault(msg["id"], []).append(msg["content"])
                trial.attempted[msg["id"]] = []
            elif msg.get("ack") == "focus":
                trial.ops += 1
    proc.wait()
    trial.attempted.setdefault("<pending add>", [])
    if pending_add is not None:
        trial.attempted["<pending add>"].append(pending_add["content"])
    return trial


def check(folder: Path, trials: list[Trial], embedder: Any = None) -> list[str]:
    """Reopen the memory and list every broken promise (empty when all held)."""
    from hybrid_memory import MemoryTree

    problems: list[str] = []
    with MemoryTree.open(folder, namespace=NAMESPACE, embedder=embedder) as mem:
        nodes = {n.id: n for n in mem.nodes(include_archived=True)}
        live = {i for i, n in nodes.items() if n.live}
        # Trials ran one after another: a later writer may update an earlier one's node.
        last: dict[str, str] = {}
        in_flight: dict[str, list[str]] = {}
        for trial in trials:
            for node_id in trial.acked_adds:
                if node_id not in live:
                    problems.append(f"seed {trial.seed}: acknowledged node {node_id} is missing")
            for node_id, acked in trial.contents.items():
                last[node_id] = acked[-1]
                in_flight[node_id] = []
            for node_id, attempts in trial.attempted.items():
                in_flight.setdefault(node_id, []).extend(attempts)
        for node_id, content in last.items():
            if node_id in nodes and nodes[node_id].content not in {content, *in_flight.get(node_id, [])}:
                problems.append(
                    f"node {node_id} holds {nodes[node_id].content!r}, not its last acknowledged content {content!r}"
                )
        for n in nodes.values():
            if n.live and n.parent_id is not None and n.parent_id not in live:
                problems.append(f"orphan: live node {n.id} has no live parent {n.parent_id}")
        drift = mem.admin.verify()
        if not drift.clean:
            problems.append(f"index drift after recovery: {drift}")
        active = mem.active
        candidates = set().union(*(t.active_candidates for t in trials)) if trials else set()
        if active is not None and active.id not in candidates and not (
            "<new task>" in candidates and active.type.value == "task"
        ):
            problems.append(f"active node {active.id} was never set")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writer", nargs=2, metavar=("FOLDER", "SEED"), help=argparse.SUPPRESS)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.writer:
        writer(args.writer[0], int(args.writer[1]))
        return 0
    rng = random.Random(args.seed)
    failures = 0
    acked = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "mem"
        history: list[Trial] = []
        for n in range(args.trials):
            trial = run_writer(folder, args.seed * 100_000 + n, rng.uniform(0.05, 2.0))
            history.append(trial)
            acked += trial.ops
            problems = check(folder, history)
            failures += bool(problems)
            print(f"trial {n + 1}/{args.trials}: {trial.ops} acknowledged ops, killed after "
                  f"{trial.killed_after_s:.2f}s: {problems if problems else 'OK'}", flush=True)
    print(f"{args.trials} kill -9 trials, {acked} acknowledged operations, {failures} trials lost something")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

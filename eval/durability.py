"""Durability figures for one machine: open + recover time at size, outbox drain
rate, write throughput with several writer processes, and kill -9 trials.

    .venv/bin/python eval/durability.py [--nodes 100000] [--writers 1 2 4 8] [--pg URL] [--kill-trials 100]

Prints a table; measures, asserts nothing (the test suite does that).
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from hybrid_memory import MemoryTree  # noqa: E402
from hybrid_memory.recovery import drain_outbox  # noqa: E402
from hybrid_memory.store.schema import nodes, outbox, to_blob  # noqa: E402
from hybrid_memory.store.sql import SqlStore  # noqa: E402
from hybrid_memory.store.vectors import ChromaIndex  # noqa: E402

ROOT_DIR = Path(__file__).resolve().parents[1]


def synthetic_memory(folder: Path, n: int, drain: int, dim: int = 384) -> None:
    """n nodes (40 task branches, events under them) written straight into the store,
    with random unit embeddings; the first ``drain`` of them are left as outbox work
    and drained, to time the drain. The shape of a big memory, fast to make."""
    folder.mkdir(parents=True, exist_ok=True)
    store = SqlStore.sqlite(folder / "memory.db")
    rng = np.random.default_rng(0)
    tasks = [secrets.token_hex(8) for _ in range(40)]
    rows = []
    now = time.time()
    for i in range(n):
        task = i < len(tasks)
        node_id = tasks[i] if task else secrets.token_hex(8)
        parent = None if task else tasks[i % len(tasks)]
        vec = rng.standard_normal(dim).astype(np.float32)
        vec /= np.linalg.norm(vec)
        rows.append(dict(
            id=node_id, namespace="big", parent_id=parent, type="task" if task else "event",
            content=f"memory {i} of the synthetic workload", meta="{}", importance=0.5, confidence=0.7,
            access_count=0, pinned=False, status="live", version=1, depth=0 if task else 1,
            path=f"{node_id}/" if task else f"{parent}/{node_id}/", branch_id=node_id if task else parent,
            created_at=now, updated_at=now, accessed_at=now, active_at=now, archived_op=None,
            content_hash=secrets.token_hex(8), tokens=8, embedding=to_blob(vec), embed_model="synthetic",
        ))
    with store.engine.begin() as conn:
        for i in range(0, n, 5000):
            conn.execute(nodes.insert(), rows[i : i + 5000])
            if i < drain:
                conn.execute(outbox.insert(), [{"namespace": "big", "node_id": r["id"], "action": "upsert"} for r in rows[i : min(i + 5000, drain)]])
    index = ChromaIndex(folder / "chroma")
    start = time.perf_counter()
    drained = drain_outbox(store, index, "big")
    elapsed = time.perf_counter() - start
    print(f"| outbox drain ({drained:,} upserts into embedded Chroma) | {drained / elapsed:,.0f} ops/s |")
    index.close()
    store.close()


def open_recover(folder: Path, n: int) -> None:
    start = time.perf_counter()
    with MemoryTree.open(folder, namespace="big") as mem:
        opened = time.perf_counter() - start
        state = mem.recover()
        total = time.perf_counter() - start
    print(f"| open + recover at {n:,} nodes (live {state.live_nodes:,}) | {total * 1000:,.0f} ms (open {opened * 1000:,.0f} ms) |")


WRITER = textwrap.dedent(
    """
    import json, sys, time, torch
    torch.set_num_threads(1)
    from hybrid_memory import MemoryTree
    folder, store, who, count = sys.argv[1], sys.argv[2] or None, sys.argv[3], int(sys.argv[4])
    with MemoryTree.open(folder, namespace="w", store=store) as mem:
        mem.embedder.embed(["warm"])
        print("ready", flush=True)
        sys.stdin.readline()
        task = mem.add(f"writer {who}", type="task")
        start = time.perf_counter()
        for i in range(count):
            mem.add(f"writer {who} observation {i} about shipment {i * 13}", type="event", parent=task)
        print(json.dumps({"seconds": time.perf_counter() - start, "count": count}), flush=True)
    """
)


def writers(folder: Path, procs: int, count: int, store_url: str | None) -> float:
    script = folder / "writer.py"
    folder.mkdir(parents=True, exist_ok=True)
    script.write_text(WRITER)
    ps = [subprocess.Popen([sys.executable, str(script), str(folder), store_url or "", str(w), str(count)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for w in range(procs)]
    for p in ps:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    start = time.perf_counter()
    for p in ps:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in ps:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"writer failed with {p.returncode}")
    return procs * count / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--drain", type=int, default=10_000, help="outbox operations to time the drain with")
    ap.add_argument("--writers", type=int, nargs="*", default=[1, 2, 4, 8])
    ap.add_argument("--per-writer", type=int, default=40)
    ap.add_argument("--pg", default=os.environ.get("HYBRID_MEMORY_TEST_PG_URL"), help="SQLAlchemy URL of a PostgreSQL database")
    ap.add_argument("--kill-trials", type=int, default=0)
    args = ap.parse_args()
    print("| measure | figure |\n|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big"
        synthetic_memory(big, args.nodes, min(args.drain, args.nodes))
        open_recover(big, args.nodes)
        for backend in ["sqlite"] + (["postgresql"] if args.pg else []):
            for n in args.writers:
                url = None
                if backend == "postgresql":
                    from sqlalchemy import create_engine, text

                    schema = f"hm_bench_{secrets.token_hex(4)}"
                    with create_engine(args.pg, isolation_level="AUTOCOMMIT").connect() as conn:
                        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
                    url = f"{args.pg}?options=-csearch_path%3D{schema}"
                rate = writers(Path(tmp) / f"w-{backend}-{n}", n, args.per_writer, url)
                print(f"| add throughput, {n} writer process(es), {backend} | {rate:,.0f} memories/s |")
    if args.kill_trials:
        out = subprocess.run([sys.executable, str(ROOT_DIR / "tests" / "crash_harness.py"), "--trials", str(args.kill_trials)],
                             capture_output=True, text=True)
        print(f"| kill -9 trials | {out.stdout.strip().splitlines()[-1]} |")


if __name__ == "__main__":
    main()

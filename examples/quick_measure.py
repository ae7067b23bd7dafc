"""Rough figures for one machine: write and retrieval latency on a ~1,200-node memory.

    .venv/bin/python examples/quick_measure.py

Not a benchmark suite (that lives with the evaluation); a quick look after a change.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from hybrid_memory import ROOT, MemoryTree  # noqa: E402


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    rng = random.Random(1)
    topics = ["expense claim", "server migration", "travel booking", "code review", "support ticket",
              "报销流程", "服务器迁移", "出差订票"]
    with tempfile.TemporaryDirectory() as folder, MemoryTree.open(folder, namespace="measure") as mem:
        mem.embedder.embed(["warm up"])
        tasks = [mem.add(f"Task: {t} #{i}", type="task", parent=ROOT) for i, t in enumerate(topics * 5)]
        lat = []
        for i in range(200):
            task = rng.choice(tasks)
            start = time.perf_counter()
            mem.add(f"Observation {i} about the {task.content}: step {rng.randint(1, 999)} done", type="event", parent=task)
            lat.append((time.perf_counter() - start) * 1000)
        print(f"add, one by one:      p50 {statistics.median(lat):6.1f} ms   p95 {pct(lat, .95):6.1f} ms")
        items = [dict(content=f"Batch note {i} on {rng.choice(topics)} item {rng.randint(1, 10**6)}", type="fact",
                      parent=rng.choice(tasks)) for i in range(1000)]
        start = time.perf_counter()
        mem.add_many(items)
        print(f"add_many (1,000):     {1000 / (time.perf_counter() - start):6.0f} nodes/s")
        texts = [it["content"] for it in items[:256]]
        start = time.perf_counter()
        mem.embedder.embed(texts)
        print(f"raw embedding batch:  {256 / (time.perf_counter() - start):6.0f} texts/s (the floor of add_many)")
        lat = []
        for q in ["where does the expense claim stand", "服务器迁移进度", "which hotel was booked", "code review comments"] * 25:
            start = time.perf_counter()
            mem.retrieve(q, k=8)
            lat.append((time.perf_counter() - start) * 1000)
        print(f"retrieve ({mem.admin.stats().live} nodes): p50 {statistics.median(lat):6.1f} ms   p95 {pct(lat, .95):6.1f} ms")


if __name__ == "__main__":
    main()

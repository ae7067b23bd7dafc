"""Offline evaluation of hybrid_memory against baselines.

Traces (JSON Lines of add/focus/feedback/restart/query events, the format in the
design notes) come from the project's generator (:mod:`eval.generate`), from a
file, or from the real data sets (:mod:`eval.datasets`). The harness, the
systems under test, the metrics and the report ship in the package
(:mod:`hybrid_memory.evaluation`), so ``hybrid-memory eval --trace FILE`` runs from
an installed wheel; this folder adds the generator, the data sets, the suite, the
benchmarks and the research logs.

Run it as ``python -m eval``, ``make eval`` or ``hybrid-memory eval --trace FILE``.
"""

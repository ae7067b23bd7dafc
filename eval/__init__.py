"""Offline evaluation of hybrid_memory against baselines.

Traces (JSON Lines of add/focus/feedback/restart/query events, the format in the
design notes) come from the project's generator (:mod:`eval.generate`), from a
file, or from the real data sets (:mod:`eval.datasets`). :mod:`eval.harness`
replays each trace into every system under test (:mod:`eval.systems`) and
measures them with one set of definitions (:mod:`eval.metrics`);
:mod:`eval.report` writes the table, ``results.json``, ``report.md`` and plots.

Run it as ``python -m eval``, ``make eval`` or ``hybrid-memory eval``.
"""

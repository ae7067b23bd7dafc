"""The offline evaluation of a memory, shipped with the package.

A trace (JSON Lines of add, focus, feedback, restart and query events: :mod:`.trace`)
is replayed into hybrid_memory and into baselines that see the same events and read
the same embeddings (:mod:`.systems`); :mod:`.harness` measures them with one set of
definitions (:mod:`.metrics`), and :mod:`.report` writes the table,
``results.json``, ``report.md`` and plots. ``hybrid-memory eval --trace FILE``
(:mod:`.cli`) runs it; a source checkout adds generated traces and the real data sets
(``python -m eval``).
"""

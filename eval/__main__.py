"""``python -m eval``: the evaluation's command line."""

from eval.harness import main

raise SystemExit(main())

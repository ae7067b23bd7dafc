# The README's commands. Each creates .venv when missing and installs the project:
# torch==2.13.0 first (the local CPU build), then the project with the bundled model.
# Bytecode: pip installs with --no-compile (one file at a time, most of a minute),
# then compileall writes every .pyc on both cores (~30 s). Python would compile what
# it imports on first use, but not where PYTHONDONTWRITEBYTECODE is set (as on this
# project's machines): there every process compiled sqlalchemy, numpy, chromadb and
# the rest again, which doubled the cold start of every command (`hybrid-memory
# stats` 0.9 s instead of 0.4 s). The one file left out is torch's test helper
# written for Python 3.12.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export ANONYMIZED_TELEMETRY := False

.PHONY: install demo test eval bench bench-peers lint typecheck clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q --no-compile torch==2.13.0
	$(BIN)/pip install -q --no-compile -e '.[model,multilingual,dev,postgres,eval,server]'
	$(BIN)/python -m compileall -q -j 0 -x 'torch/testing/_internal/py312' $(VENV)/lib/python*/site-packages hybrid_memory eval >/dev/null
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/expense_demo.py

# Two workers (pytest-xdist), each given whole files, so that a file's [sqlite] and
# [postgresql] variants share one worker's embedding cache: 8.5 minutes on two cores,
# 14.5 in one process. TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The offline evaluation on generated traces (English and Chinese, 10k nodes each);
# tables, results.json, report.md and plots land in eval-out/.
EVAL_NODES ?= 10000
eval: $(STAMP)
	$(BIN)/python -m eval --generate $(EVAL_NODES) --lang en --out eval-out/generated-en
	$(BIN)/python -m eval --generate $(EVAL_NODES) --lang zh --out eval-out/generated-zh

# Speed and scale on generated traces; results.json and table.md land in bench-out/.
BENCH_SIZES ?= 1000,10000,100000
RELATIONAL_SIZES ?= 1000000
bench: $(STAMP)
	$(BIN)/python -m eval.bench --sizes $(BENCH_SIZES) --relational-sizes $(RELATIONAL_SIZES) --out bench-out

# mem0 and LangGraph's InMemoryStore beside hybrid_memory on one generated workload, each
# peer in a virtualenv of its own made once under bench-out/peer-envs (never a project
# dependency); table.md and results.json land in bench-out/peers.
PEER_NODES ?= 1000
bench-peers: $(STAMP)
	$(BIN)/python -m eval.peers --nodes $(PEER_NODES) --out bench-out/peers

lint: $(STAMP)
	$(BIN)/ruff check hybrid_memory tests examples eval

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis demo-memory eval-out bench-out

"""The ``hybrid-memory`` command: a thin layer over MemoryTree, one method per command.

``parser`` builds the argparse tree; the ``commands_*`` modules hold one ``cmd_*``
function per command, grouped as the help lists them (writing, reading,
portability, the index, safety, the services); ``common`` holds what they share."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Sequence

from ..errors import ConfigError, HybridMemoryError, InvalidInputError
from .parser import build_parser

__all__ = ["build_parser", "main", "run_eval"]


def run_eval(argv: Sequence[str], command: str = "eval") -> int:
    """``hybrid-memory eval ...``: the offline evaluation of a trace file, shipped in
    the package (:mod:`hybrid_memory.evaluation`). ``hybrid-memory bench ...``: the
    benchmarks, which live beside the package in the source tree (``eval/``)."""
    if command == "eval":
        from ..evaluation.cli import main as evaluate

        return evaluate(list(argv), prog="hybrid-memory eval")
    if "" not in sys.path and os.path.isfile(os.path.join("eval", "bench.py")):
        sys.path.insert(0, os.getcwd())  # a non-editable install run from the checkout
    try:
        entry = importlib.import_module("eval.bench").main
    except ImportError:
        print(f"error [config_error]: hybrid-memory {command} runs from a source checkout of hybrid_memory "
              "(it needs the eval/ folder beside the package; run it from the checkout's top folder)",
              file=sys.stderr)
        return ConfigError.exit_code
    code: int = entry(list(argv), prog=f"hybrid-memory {command}")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for a in argv:
        try:
            a.encode("utf-8")
        except UnicodeEncodeError:
            print("error [invalid_input]: an argument is not valid UTF-8 text", file=sys.stderr)
            return InvalidInputError.exit_code
    if argv[:1] in (["eval"], ["bench"]):
        return run_eval(argv[1:], argv[0])
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except HybridMemoryError as exc:
        print(f"error [{exc.code}]: {exc}", file=sys.stderr)
        return exc.exit_code
    except json.JSONDecodeError as exc:
        print(f"error [invalid_input]: --meta is not valid JSON: {exc}", file=sys.stderr)
        return 2
    except RecursionError:
        print("error [invalid_input]: an argument is nested too deeply", file=sys.stderr)
        return 2

"""What every command shares: opening the memory (or its store alone), naming a node
by a short id, and printing text or JSON."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, is_dataclass
from typing import Any

from ..config import Config
from ..crypto import Keyring
from ..errors import InvalidInputError
from ..ids import short_id
from ..model import Node
from ..store.sql import SqlStore
from ..tree import MemoryTree


def open_tree(args: argparse.Namespace) -> MemoryTree:
    """The facade over the memory the global options name."""
    config = Config.load(args.config, overrides={"embedding": {"model": args.model}}) if args.model else args.config
    return MemoryTree.open(
        args.path, namespace=args.namespace, session=args.session, config=config,
        store=args.db_url or None, chroma_url=args.chroma_url or None,
        key=Keyring.from_file(args.key_file) if args.key_file else None,
    )


def open_store(args: argparse.Namespace, keyring: Keyring | None = None, *, check_keys: bool = True) -> SqlStore:
    """The relational store alone (no model, no index): for store-wide commands."""
    if args.db_url:
        return SqlStore(args.db_url, keyring=keyring, check_keys=check_keys)
    db = os.path.join(args.path, "memory.db")
    if not os.path.isfile(db):
        raise InvalidInputError(f"no memory at {args.path} (no memory.db there)")
    return SqlStore(f"sqlite:///{os.path.abspath(db)}", keyring=keyring, check_keys=check_keys)


def clip(text: str, n: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def resolve(mem: MemoryTree, ref: str) -> str:
    """A full id, or a unique prefix or suffix of one (``tree`` prints the last eight
    digits: ids begin with their time, so memories of one minute share a prefix)."""
    matches = [n.id for n in mem.nodes(include_archived=True) if n.id.startswith(ref) or n.id.endswith(ref)]
    if len(matches) == 1:
        return matches[0]
    return ref  # let the library raise NotFoundError (or NamespaceError) for it


def jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {k: jsonable(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "value") and not isinstance(value, (int, float, str)):
        return value.value
    return value


def print_json(value: Any) -> None:
    print(json.dumps(jsonable(value), ensure_ascii=False, indent=2))


def node_line(mem: MemoryTree, n: Node, now: float) -> str:
    flags = " pinned" if n.pinned else ""
    flags += " archived" if not n.live else ""
    return f"{short_id(n.id)} [{n.type.value}] {clip(n.content)}  w={mem.weight(n, now):.2f}{flags}"


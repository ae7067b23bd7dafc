"""docs/configuration.md, made from the Config dataclasses and configs/default.toml.

    python -m hybrid_memory.configdoc > docs/configuration.md

Every field of every section dataclass is listed with its type, its default (the
TOML's value) and its meaning (the comment above it in the TOML; a key without a
comment of its own shares the one above it). A field the TOML does not comment,
or a section the dataclasses do not know, raises: the page cannot silently miss a
setting. tests/test_docs.py checks that the page checked in is this output.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, get_type_hints

from .config import Config, default_config_path

_SECTION = re.compile(r"^\[([\w.]+)\]\s*$")
_KEY = re.compile(r"^(\w+)\s*=\s*(.+?)\s*(?:#.*)?$")


@dataclass
class _Section:
    name: str
    about: str = ""
    #: key -> (value as written, meaning)
    keys: dict[str, tuple[str, str]] = field(default_factory=dict)


def read_comments(text: str) -> dict[str, _Section]:
    """Each TOML section with its description and each key's value and meaning."""
    sections: dict[str, _Section] = {}
    current: _Section | None = None
    comment: list[str] = []
    last_meaning = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("#").strip())
        elif m := _SECTION.match(stripped):
            current = sections[m[1]] = _Section(m[1], " ".join(comment))
            comment, last_meaning = [], ""
        elif (m := _KEY.match(stripped)) and current is not None:
            meaning = " ".join(comment) or last_meaning
            current.keys[m[1]] = (m[2], meaning)
            comment, last_meaning = [], meaning
        elif not stripped and not current:
            comment = []  # the file's own header
    return sections


def _type_name(hint: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "string"}.get(hint, "table of numbers")


def render(toml_text: str | None = None) -> str:
    """The configuration page, as markdown."""
    if toml_text is None:
        toml_text = Path(default_config_path()).read_text(encoding="utf-8")
    sections = read_comments(toml_text)
    lines = [
        "# Configuration",
        "",
        "<!-- Made by `python -m hybrid_memory.configdoc > docs/configuration.md` from",
        "configs/default.toml and hybrid_memory/config.py; tests/test_docs.py checks it is current. -->",
        "",
        "Every setting has its default in `configs/default.toml`. A file of your own names",
        "only what it changes, and is given as `MemoryTree.open(..., config=Config.load(path))`,",
        "`hybrid-memory --config FILE` or `Config.load(overrides={...})`. An unknown key, a",
        "value of the wrong type or out of range raises `ConfigError`; a key that moved",
        "says where it went.",
        "",
        "```toml",
        "[retrieval]",
        "k = 5",
        "budget_tokens = 1200",
        "```",
    ]
    known = set()
    hints = get_type_hints(Config)
    for f in fields(Config):
        cls = hints[f.name]
        known.add(f.name)
        lines += _section(f.name, cls, sections, known)
    unknown = sorted(set(sections) - known)
    if unknown:
        raise ValueError(f"configs/default.toml has sections no dataclass reads: {unknown}")
    return "\n".join(lines) + "\n"


def _section(name: str, cls: Any, sections: Mapping[str, _Section], known: set[str]) -> list[str]:
    section = sections.get(name)
    if section is None:
        raise ValueError(f"configs/default.toml lacks [{name}]")
    out = ["", f"## [{name}]", "", section.about, "", "| setting | type | default | meaning |", "|---|---|---|---|"]
    nested = []
    hints = get_type_hints(cls)
    previous = ""
    for f in fields(cls):
        key = "lambda" if f.name == "lambda_" else f.name
        if is_dataclass(hints[f.name]) or hints[f.name] == Mapping[str, float]:
            nested.append(key)
            continue
        if key not in section.keys or not section.keys[key][1]:
            raise ValueError(f"configs/default.toml: {name}.{key} is missing or has no comment")
        value, meaning = section.keys[key]
        shown = "(as above)" if meaning == previous else meaning
        out.append(f"| `{key}` | {_type_name(hints[f.name])} | `{_cell(value)}` | {_cell(shown)} |")
        previous = meaning
    for key in nested:
        sub = sections.get(f"{name}.{key}")
        if sub is None or not sub.about:
            raise ValueError(f"configs/default.toml: [{name}.{key}] is missing or has no comment")
        known.add(f"{name}.{key}")
        out += ["", f"### [{name}.{key}]", "", sub.about, "", "| key | default |", "|---|---|"]
        out += [f"| `{k}` | `{_cell(v)}` |" for k, (v, _) in sub.keys.items()]
    return out


def _cell(text: str) -> str:
    """``text`` as a table cell: a bar would end the cell, so it is escaped."""
    return text.replace("|", "\\|")


if __name__ == "__main__":
    sys.stdout.write(render())

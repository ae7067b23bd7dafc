"""hybrid_memory: a weighted memory tree for long-running LLM agents.

The tree and its weights live in a relational store (SQLite by default), the
embeddings of node contents in Chroma; retrieval finds the task branch by meaning,
then ranks inside it by weight. Open one with :meth:`MemoryTree.open`.
"""

from .admin import Admin
from .config import Config
from .crypto import Keyring, generate_key
from .embed import Embedder, SentenceTransformerEmbedder
from .errors import (
    AccessDeniedError,
    ClosedError,
    ConfigError,
    ConflictError,
    CycleError,
    EncryptionKeyError,
    HybridMemoryError,
    IngestError,
    InvalidContentError,
    InvalidInputError,
    InvalidTypeError,
    InvalidWeightError,
    NamespaceError,
    NotFoundError,
    StorageError,
)
from .ingest import IngestReport
from .items import AUTO, Auto
from .model import (
    BranchScore,
    Checkpoint,
    Drift,
    ForgetReport,
    Node,
    NodeType,
    Placement,
    Recall,
    RecoveryState,
    ScoredNode,
    Stats,
    Status,
)
from .store import ChromaIndex, SqlStore, VectorIndex
from .tree import MemoryTree
from .writing import ROOT, Root

__version__ = "0.1.0"

__all__ = [
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

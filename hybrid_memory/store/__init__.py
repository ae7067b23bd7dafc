"""Storage: the relational source of truth (SQLAlchemy) and the derived vector index."""

from .sql import SqlStore
from .vectors import ChromaIndex, VectorIndex

__all__ = ["ChromaIndex", "SqlStore", "VectorIndex"]

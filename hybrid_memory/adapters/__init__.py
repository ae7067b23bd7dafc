"""Adapters that put a :class:`~hybrid_memory.MemoryTree` behind other frameworks' interfaces.

- :mod:`hybrid_memory.adapters.langchain`: ``HybridMemoryRetriever``, a LangChain
  ``BaseRetriever`` (``pip install 'hybrid-memory[langchain]'``).
- :mod:`hybrid_memory.adapters.langgraph`: ``HybridMemoryStore``, a LangGraph
  ``BaseStore`` for long-term memory (``pip install 'hybrid-memory[langgraph]'``).

Each module imports its framework; this package imports neither, so
``import hybrid_memory`` works without them.
"""

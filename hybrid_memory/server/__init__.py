"""The HTTP service: ``hybrid-memory serve`` (``pip install 'hybrid-memory[server]'``).

A thin layer over :class:`hybrid_memory.MemoryTree`: FastAPI routes under
``/v1/{namespace}/...``, request and response models of their own
(:mod:`.models`), API keys stored hashed and bound to one namespace and one role
(:mod:`.keys`), library errors mapped to stable HTTP statuses, Prometheus metrics at
``/metrics`` and the tree inspector page at ``/``. Import :func:`create_app` from
:mod:`hybrid_memory.server.app`; importing ``hybrid_memory`` never imports FastAPI.
"""

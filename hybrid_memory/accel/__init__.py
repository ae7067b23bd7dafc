"""Parts that exist only for speed: the store alone gives the same answers.

Each keeps, in this process, a copy of something the store holds and follows the
store's writes to stay in step with it: :mod:`.rowcache` the node rows retrieval
reads, :mod:`.lexicon` one namespace's lexical index, :mod:`.graph` one
namespace's vectors as an HNSW graph beside Chroma's. A copy that cannot follow
(another process wrote, a PostgreSQL store, a missing library) is dropped or
never built, and the store answers. This package imports nothing at import time:
each module is imported where it is used.
"""

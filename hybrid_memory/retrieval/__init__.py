"""Retrieval: locate the task branch by meaning, then rank inside it, in named stages.

1. query (:mod:`.query`): the query's words in the lexical index, each memory's
   share of its informative words; the query embeds meanwhile.
2. candidates (:mod:`.candidates`): the nearest memories of the lexical index and
   of the vector index (both unfiltered within the namespace), each with its dense
   score from its stored embedding.
3. locate (:mod:`.locate`): the candidates grouped by branch and each branch
   scored by a similarity that blends the two channels.
4. expand (:mod:`.expand`): the chosen branches and the located one's family
   opened, every live memory in them scored from the embeddings kept in the
   relational store (no filtered vector query) and by BM25 within its branch.
5. rank (:mod:`.rank`): ``lambda*similarity + (1-lambda)*weight(now)``, times what a
   branch pays for falling behind the located one; the k hits, and the branch's
   standing memories.
6. select (:mod:`.select`): the picks with each one's ancestors, cut to the token
   budget and rendered in tree order.

:class:`Retriever` (:mod:`.retriever`) runs them and notes each in ``Recall.stages``.
"""

from .rank import branch_factor, rank_key
from .retriever import Retriever

__all__ = ["Retriever", "branch_factor", "rank_key"]

"""Time travel and portability: replaying the operation log, ``rewind(seq=...)``,
and JSON Lines export / import.

The operation log (``hm_oplog``) is the history of a namespace: every mutation logs
what it did, completely enough that :func:`replay` rebuilds the tree (every node
field but the embedding, and the session cursors) from the log alone. On top of it:

* **Time travel** (:func:`time_travel`, ``MemoryTree.rewind(seq=N)`` or
  ``rewind(as_of=ts)``) computes the state at log position ``N`` by replay and
  rewrites the namespace to it in one transaction. It logs a ``time_travel`` entry
  whose replay re-applies the same computation, so the log stays the truth, and a
  time travel is undone by another one to the position it started from.

* **Erasure wins over time travel.** ``delete`` purges the payloads of every log
  entry about the erased nodes (``{"purged": true}``), keeping in its own entry a
  *skeleton* of each (the same payload without content, meta, hashes or notes), so
  that replay still knows the structure: which ancestor a write touched, which node
  a restore brought back. An erased node is a *ghost* in replay: it has a place in
  the tree but no words, so it can never come back; a time travel to a position
  where it existed leaves it out, together with whatever hung under it then.

* **Export / import** (:func:`export`, :func:`import_`): a portable JSON Lines file,
  a header line then one object per line (``node``, ``cursor``, ``checkpoint``, and
  with ``include_log`` ``op``). Embeddings travel as base64 float32 little-endian, so
  an import re-embeds nothing (unless the model differs). An import goes into an
  empty namespace, id for id, in one transaction, after every line was checked.

Details worth knowing:

* A log *position* is a ``seq`` of ``hm_oplog`` (one counter for the whole store);
  the state at ``N`` is the state after every entry of the namespace with
  ``seq <= N``. ``as_of`` picks the position just before the first entry stamped
  later than ``as_of`` (entries in log order; a write given an explicit earlier
  ``ts`` does not move the position back). Position 0 is the empty memory.
* A time travel rewrites nodes (all their fields, versions included), terms and
  every session's cursor; it keeps checkpoints (they are history, and a
  checkpoint's ``log_seq`` is a natural target) and groups branches by the
  ``branch_by`` configured now.
* An import with the file's log keeps its positions when they are all past this
  store's log, else shifts them all (and archive positions, checkpoints, time
  travel targets with them). An import without it logs one ``import`` entry per
  node and cursor, so the log still explains the memory; positions before the
  import then hold nothing. An imported log is not checked against the nodes.
"""

from .format import FORMAT, STATE_FIELDS, VERSION, BadSnapshotError
from .host import HasLog, Host
from .oplog import Op, access_payload, describe, read_ops, recent_ops, skeletons
from .replay import State, erased_ids, live_state, replay, travel_state
from .rewind import TimeTravel, time_travel
from .snapshot import Transfer, export, import_, node_line

__all__ = [
    "HasLog",
    "Host",
    "node_line",
    "FORMAT",
    "STATE_FIELDS",
    "VERSION",
    "BadSnapshotError",
    "Op",
    "State",
    "TimeTravel",
    "Transfer",
    "access_payload",
    "describe",
    "erased_ids",
    "export",
    "import_",
    "live_state",
    "read_ops",
    "recent_ops",
    "replay",
    "skeletons",
    "time_travel",
    "travel_state",
]


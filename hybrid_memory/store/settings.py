"""Store-wide settings (``hm_settings``: the schema version, the encryption keys'
ids, the audit head) and the check that the keyring holds the keys the stored
values are sealed with."""

from __future__ import annotations

import json

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import Connection

from ..crypto import KEY_ENV, KEY_FILE_ENV, missing_keys
from ..errors import EncryptionKeyError, StorageError
from .engine import Database
from .schema import nodes, oplog, settings


class Statements:
    """The prebuilt statements of this repository's hot paths (as
    :class:`hybrid_memory.store.nodes.Statements`)."""

    get_setting = select(settings.c.value).where(settings.c.key == bindparam("key"))


class SettingsRepository:
    """Keys and values of ``hm_settings`` (``store.settings``)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def get(self, conn: Connection, key: str) -> str | None:
        return conn.execute(Statements.get_setting, {"key": key}).scalar()

    def set(self, conn: Connection, key: str, value: str) -> None:
        if self._db.is_postgres:  # an upsert: two processes may set the same key at once
            # Imported here: loading the dialect slows every start.
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            q = pg_insert(settings).values(key=key, value=value)
            conn.execute(q.on_conflict_do_update(index_elements=[settings.c.key], set_={"value": value}))
        elif self.get(conn, key) is None:
            conn.execute(insert(settings).values(key=key, value=value))
        else:
            conn.execute(update(settings).where(settings.c.key == key).values(value=value))

    def sealing_keys(self, conn: Connection) -> list[str]:
        """The ids of the keys the store's sealed values may be under ([] for a plain store)."""
        raw = self.get(conn, "encryption")
        if raw is None:
            return []
        try:
            keys = json.loads(raw)["keys"]
        except (ValueError, KeyError, TypeError):
            raise StorageError(f"the store's encryption setting is unreadable: {raw!r}") from None
        return [str(k) for k in keys]

    def check_keys(self, conn: Connection) -> None:
        """The keys this store's sealed values need are all in the keyring; a store
        first opened with a keyring records its key; plain data is never mixed in
        silently (``rotate_key`` seals it)."""
        stored = self.sealing_keys(conn)
        if stored:
            gone = missing_keys(stored, self._db.keyring)
            if self._db.keyring is None:
                raise EncryptionKeyError(
                    f"this memory is encrypted (key {', '.join(stored)}): give its key "
                    f"(${KEY_ENV}, ${KEY_FILE_ENV} or security.key_file)")
            if gone:
                raise EncryptionKeyError(
                    f"this memory is sealed with key {', '.join(gone)}, which the keyring does not hold "
                    f"(it holds {', '.join(self._db.keyring.key_ids)}): the wrong key")
        elif self._db.keyring is not None:
            if conn.execute(select(nodes.c.id).limit(1)).first() is not None or \
                    conn.execute(select(oplog.c.seq).limit(1)).first() is not None:
                raise EncryptionKeyError(
                    "this memory holds unencrypted data: seal it with `hybrid-memory rotate-key` "
                    "(or MemoryTree.admin.rotate_key) before opening it with a key")
            self.set(conn, "encryption", json.dumps({"scheme": "aes-256-gcm", "keys": [self._db.keyring.primary]}))

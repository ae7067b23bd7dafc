"""Encryption at rest: a keyring of AES-256-GCM keys, and what is derived from it.

What a keyring seals, when a memory is opened with one: node contents and metadata,
operation-log payloads and checkpoint notes (the relational columns that hold what
was said), and every line of an export. Sealed text reads
``hm1.<key id>.<base64url(nonce | ciphertext | tag)>``; the column's name is the
associated data, so a sealed value moved to another column does not open.

Two things must still be compared without being read, so they are *blinded*
instead: the lexical index stores each term as a keyed hash, and a node's content
hash (for exact-twin writes) is a keyed hash too. Without the key neither can be
checked against a guess.

Keys are 32 random bytes, written as base64 (``generate_key()``, ``hybrid-memory
keygen``) or 64 hex digits. A keyring lists one or more: the first seals, all of
them open. Rotation puts the new key first, keeps the old one behind it until
``rotate_key`` has resealed everything, then the old one can go.

What this does not protect: embeddings (kept in the relational store and in
Chroma) carry the meaning of a content and can be partly inverted; the process's
memory holds plain text while it runs; ids, types, weights, times and the shape of
the tree stay readable.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import EncryptionKeyError, StorageError

#: Environment variables a key is read from (the key itself, or a file holding it).
KEY_ENV = "HYBRID_MEMORY_KEY"
KEY_FILE_ENV = "HYBRID_MEMORY_KEY_FILE"

PREFIX = "hm1."
_KEY_BYTES = 32
_NONCE_BYTES = 12
_ID_CHARS = 12


def generate_key() -> str:
    """A new random key, as base64 text (what a key file or ``HYBRID_MEMORY_KEY`` holds)."""
    return base64.b64encode(secrets.token_bytes(_KEY_BYTES)).decode("ascii")


def _parse_key(text: str, where: str) -> bytes:
    s = text.strip()
    raw: bytes | None = None
    if len(s) == 2 * _KEY_BYTES and all(c in "0123456789abcdefABCDEF" for c in s):
        raw = bytes.fromhex(s)
    else:
        try:
            raw = base64.b64decode(s + "=" * (-len(s) % 4), altchars=b"-_" if ("-" in s or "_" in s) else None,
                                   validate=True)
        except (binascii.Error, ValueError):
            raw = None
    if raw is None or len(raw) != _KEY_BYTES:
        raise EncryptionKeyError(f"{where}: a key is 32 bytes written as base64 (44 characters) or 64 hex digits "
                        "(make one with `hybrid-memory keygen`)")
    return raw


def _derive(key: bytes, label: bytes) -> bytes:
    return hmac.new(key, b"hybrid_memory/" + label, hashlib.sha256).digest()


class Keyring:
    """One or more AES-256-GCM keys; the first seals, every one of them opens."""

    def __init__(self, keys: Sequence[bytes | str]) -> None:
        raw: list[bytes] = []
        for i, k in enumerate(keys):
            b = _parse_key(k, f"key {i + 1}") if isinstance(k, str) else k
            if not isinstance(b, bytes) or len(b) != _KEY_BYTES:
                raise EncryptionKeyError(f"key {i + 1}: a key is 32 bytes")
            if b not in raw:
                raw.append(b)
        if not raw:
            raise EncryptionKeyError("a keyring needs at least one key")
        self._raw = tuple(raw)
        self._ids = tuple(_derive(k, b"key-id").hex()[:_ID_CHARS] for k in raw)
        self._aead = {kid: AESGCM(k) for kid, k in zip(self._ids, raw, strict=True)}
        self._blind = [_derive(k, b"blind-index") for k in raw]

    def then(self, older: Keyring | None) -> Keyring:
        """This keyring's keys, then ``older``'s behind them (for a rotation: new, then old)."""
        return self if older is None else Keyring([*self._raw, *older._raw])

    # -- where keys come from -----------------------------------------------------

    @classmethod
    def parse(cls, text: str, where: str = "key") -> Keyring:
        """Keys one per line (or comma-separated), the sealing key first; ``#`` starts a comment."""
        keys = [part.strip() for line in text.splitlines() for part in line.split("#", 1)[0].split(",")]
        keys = [k for k in keys if k]
        if not keys:
            raise EncryptionKeyError(f"{where} holds no key")
        return cls([_parse_key(k, where) for k in keys])

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Keyring:
        p = Path(path).expanduser()
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise EncryptionKeyError(f"key file not found: {p}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise EncryptionKeyError(f"cannot read key file {p}: {exc}") from None
        return cls.parse(text, f"key file {p}")

    @classmethod
    def resolve(cls, key: Keyring | str | None = None, key_file: str | os.PathLike[str] | None = None,
                *, data_dir: Path | None = None) -> Keyring | None:
        """The keyring to open a memory with: ``key`` (a keyring or key text) if given,
        else ``key_file``, else ``$HYBRID_MEMORY_KEY``, else ``$HYBRID_MEMORY_KEY_FILE``;
        ``None`` when there is none. A key file inside ``data_dir`` is refused: a key
        stored beside the data protects nothing."""
        if isinstance(key, Keyring):
            return key
        if key is not None:
            if not isinstance(key, str):
                raise EncryptionKeyError(f"key must be key text or a Keyring, got {type(key).__name__}")
            return cls.parse(key)
        env_key = os.environ.get(KEY_ENV, "").strip()
        path = key_file or os.environ.get(KEY_FILE_ENV, "").strip() or None
        if key_file is None and env_key:
            return cls.parse(env_key, f"${KEY_ENV}")
        if path is None:
            return None
        p = Path(path).expanduser().resolve()
        if data_dir is not None:
            d = data_dir.resolve()
            if p == d or d in p.parents:
                raise EncryptionKeyError(f"the key file {p} lies inside the memory's folder {d}: keep keys apart from the data")
        return cls.from_file(p)

    # -- sealing ------------------------------------------------------------------

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Short public ids of the keys (a keyed hash of each), the sealing key first."""
        return self._ids

    @property
    def primary(self) -> str:
        return self._ids[0]

    def seal(self, plain: str, purpose: str) -> str:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        ct = self._aead[self._ids[0]].encrypt(nonce, plain.encode("utf-8", "surrogatepass"), purpose.encode())
        return f"{PREFIX}{self._ids[0]}.{base64.urlsafe_b64encode(nonce + ct).decode('ascii').rstrip('=')}"

    def unseal(self, value: str, purpose: str) -> str:
        """The plain text of a sealed value; a value that is not sealed is returned as it is
        (a memory being encrypted for the first time holds both)."""
        kid = sealed_by(value)
        if kid is None:
            return value
        aead = self._aead.get(kid)
        if aead is None:
            raise StorageError(f"a {purpose} value is sealed with key {kid}, which is not in the keyring "
                               f"(keys: {', '.join(self._ids)})")
        body = value[len(PREFIX) + _ID_CHARS + 1:]
        try:
            blob = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            return aead.decrypt(blob[:_NONCE_BYTES], blob[_NONCE_BYTES:], purpose.encode()).decode("utf-8", "surrogatepass")
        except (InvalidTag, ValueError, binascii.Error):
            raise StorageError(f"a sealed {purpose} value does not open with key {kid}: it was altered") from None

    # -- blinding -----------------------------------------------------------------

    def blind(self, term: str) -> list[str]:
        """The stored forms of a lexical term, under each key (the sealing key's first)."""
        data = term.encode("utf-8", "surrogatepass")
        return [hmac.new(k, b"t:" + data, hashlib.sha256).hexdigest()[:32] for k in self._blind]

    def content_hash(self, content: str) -> str:
        """The keyed hash of a content (whitespace-normalised), under the sealing key."""
        return self.content_hashes(content)[0]

    def content_hashes(self, content: str) -> list[str]:
        data = " ".join(content.split()).encode("utf-8", "surrogatepass")
        return [hmac.new(k, b"c:" + data, hashlib.sha256).hexdigest() for k in self._blind]


def sealed_by(value: object) -> str | None:
    """The key id a value was sealed with, or None for a value that is not sealed."""
    if (isinstance(value, str) and value.startswith(PREFIX) and len(value) > len(PREFIX) + _ID_CHARS + 1
            and value[len(PREFIX) + _ID_CHARS] == "."):
        kid = value[len(PREFIX):len(PREFIX) + _ID_CHARS]
        if all(c in "0123456789abcdef" for c in kid):
            return kid
    return None


def missing_keys(stored: Iterable[str], ring: Keyring | None) -> list[str]:
    have = set(ring.key_ids) if ring is not None else set()
    return [k for k in stored if k not in have]


__all__ = ["KEY_ENV", "KEY_FILE_ENV", "Keyring", "generate_key", "missing_keys", "sealed_by"]

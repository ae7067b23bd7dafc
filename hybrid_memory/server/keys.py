"""API keys of the HTTP service: each bound to one namespace and one role, stored
only as a SHA-256 hash in a JSON file (``hybrid-memory apikey add`` prints a new key
once). A key is ``hm_<id>_<secret>``: the id finds the entry, the hash of the whole
key is compared in constant time. Keys are 32 random bytes, so a fast hash suffices."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import _validate as check
from ..errors import ConfigError


@dataclass(frozen=True)
class ApiKey:
    id: str
    namespace: str
    role: str
    sha256: str
    created: float
    label: str = ""


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


class KeyFile:
    """The keys of one service, in a JSON file (written atomically, mode 0600)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._keys: dict[str, ApiKey] = {}
        if self.path.exists():
            try:
                raw = json.loads(self.path.read_text(encoding="utf-8"))
                self._keys = {k["id"]: ApiKey(**k) for k in raw["keys"]}
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ConfigError(f"the API key file {self.path} is unreadable: {exc}") from None

    def __len__(self) -> int:
        return len(self._keys)

    def entries(self) -> list[ApiKey]:
        return list(self._keys.values())

    def add(self, namespace: str, role: str, label: str = "") -> str:
        """Make a key for ``namespace`` with ``role``; returns the key text (shown once)."""
        check.namespace(namespace)
        check.role(role)
        key_id = secrets.token_hex(4)
        while key_id in self._keys:
            key_id = secrets.token_hex(4)
        key = f"hm_{key_id}_{base64.urlsafe_b64encode(secrets.token_bytes(32)).decode('ascii').rstrip('=')}"
        self._keys[key_id] = ApiKey(key_id, namespace, role, _digest(key), time.time(), label)
        self._save()
        return key

    def revoke(self, key_id: str) -> bool:
        gone = self._keys.pop(key_id, None) is not None
        if gone:
            self._save()
        return gone

    def lookup(self, key: str) -> ApiKey | None:
        """The entry of a presented key, or None (unknown, malformed or wrong)."""
        parts = key.split("_") if isinstance(key, str) else []
        if len(parts) < 3 or parts[0] != "hm":
            return None
        entry = self._keys.get(parts[1])
        if entry is None or not hmac.compare_digest(entry.sha256, _digest(key)):
            return None
        return entry

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        body = json.dumps({"keys": [asdict(k) for k in self._keys.values()]}, indent=2)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

"""Who asked not to be remembered, and the keyed hash that names people in the table.

Opt-outs (and the erasure markers) are stored under a keyed hash of the user id
(HMAC-SHA256 with a secret created at deploy time), so the list names nobody, even to
someone who can read the table and knows the member list, and it survives a person's
erasure. Ingest reads the list through a short-lived cache: one query per minute per
container, never one per event. Consolidation reads it fresh for a batch's authors
(`OptOuts.barred`), so a message that slipped past a stale cache is still dropped unread.

The key, by one rule (`hash_key_from_environment`):
- `MEMORY_HASH_KEY_SECRET` (deployed functions: the ARN of the Secrets Manager secret
  template.yaml creates) is read once per container with Powertools Parameters;
- else `MEMORY_HASH_KEY` (local runs, tests) is the key itself, at least 16 characters;
- both set is an error;
- neither: an embedded development key, only outside Lambda and only when DynamoDB is a
  loopback endpoint (a local table); anywhere else it is an error, never a silent constant.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from functools import lru_cache
from urllib.parse import urlparse

from botmemory.clock import Clock
from botmemory.settings.config import ConfigError
from botmemory.settings.secrets import one_form, read_secret
from botmemory.storage.repository import MemoryRepository

log = logging.getLogger(__name__)

CACHE_MS = 60_000
HASH_KEY_ENV = "MEMORY_HASH_KEY"
HASH_KEY_SECRET_ENV = "MEMORY_HASH_KEY_SECRET"  # nosec B105 # the name of an environment variable, not a key
MIN_KEY_CHARS = 16
# Only for a local table, outside Lambda: a deployed function never falls back to it.
_DEVELOPMENT_KEY = b"discord-memory/local-development-only/not-a-secret"
# Opt-outs written before the key existed: salted, unkeyed. Read (never written) so that
# nobody who opted out is remembered again; each is rewritten keyed when next seen.
_LEGACY_SALT = b"discord-memory/opt-out/v1"
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


class HashKeyError(ConfigError):
    """No usable key for the person hash."""


def _is_local_table(env: Mapping[str, str]) -> bool:
    endpoint = (
        env.get("AWS_ENDPOINT_URL_DYNAMODB", "").strip() or env.get("AWS_ENDPOINT_URL", "").strip()
    )
    return bool(endpoint) and (urlparse(endpoint).hostname or "") in _LOOPBACK


def hash_key_from_environment(environ: Mapping[str, str] | None = None) -> bytes:
    """The key of the person hash, by the rule in the module's docstring."""
    env = os.environ if environ is None else environ
    secret = env.get(HASH_KEY_SECRET_ENV, "").strip()
    direct = env.get(HASH_KEY_ENV, "").strip()
    one_form(HASH_KEY_ENV, direct, secret, error=HashKeyError)
    if secret:
        return _key_from_secret(secret)
    if direct:
        if len(direct) < MIN_KEY_CHARS:
            raise HashKeyError(f"{HASH_KEY_ENV} must hold at least {MIN_KEY_CHARS} characters")
        return direct.encode()
    if env.get("AWS_LAMBDA_FUNCTION_NAME") or not _is_local_table(env):
        raise HashKeyError(
            f"no key for the person hash: set {HASH_KEY_SECRET_ENV} to the Secrets Manager "
            f"secret that holds it (template.yaml does), or {HASH_KEY_ENV} for a local run"
        )
    log.warning("person hash: development key (local table only)")
    return _DEVELOPMENT_KEY


@lru_cache(maxsize=4)
def _key_from_secret(secret: str) -> bytes:
    """Read once per container: the key never changes while the stack lives."""
    text = read_secret(
        secret,
        variable=HASH_KEY_SECRET_ENV,
        what="person hash key",
        max_age=86_400,
        error=HashKeyError,
    )
    if len(text) < MIN_KEY_CHARS:
        raise HashKeyError(f"secret {secret!r} holds no usable key")
    return text.encode()


def person_hash(user_id: str, key: bytes | None = None) -> str:
    """The keyed hash that stands for a person in the OPTOUT and ERASED partitions."""
    secret = key if key is not None else hash_key_from_environment()
    return hmac.new(secret, user_id.encode(), hashlib.sha256).hexdigest()


def legacy_hash(user_id: str) -> str:
    return hashlib.sha256(_LEGACY_SALT + user_id.encode()).hexdigest()


class OptOuts:
    """Opt-outs and erasure markers, by person hash. The key is read on first use, so a
    function that never hashes (recall) never needs it."""

    def __init__(self, repository: MemoryRepository, clock: Clock) -> None:
        self._repository = repository
        self._clock = clock
        self._hashes: set[str] = set()
        self._loaded_at: int | None = None
        self._lock = threading.Lock()
        self._key: bytes | None = None

    def hash_of(self, user_id: str) -> str:
        """The person hash: the sort key of their OPTOUT item and of their ERASED marker."""
        if self._key is None:
            self._key = hash_key_from_environment()
        return person_hash(user_id, self._key)

    def is_opted_out(self, user_id: str | None) -> bool:
        if not user_id:
            return False
        current = self._current()
        if self.hash_of(user_id) in current:
            return True
        if legacy_hash(user_id) in current:
            self._migrate(user_id)
            return True
        return False

    def barred(self, user_ids: Iterable[str]) -> set[str]:
        """Of these people, the ones who opted out or are being erased, read fresh (strongly
        consistent, one BatchGetItem for up to 33 people), never from the cache."""
        people = sorted({u for u in user_ids if u})
        if not people:
            return set()
        keyed = {self.hash_of(u): u for u in people}
        legacy = {legacy_hash(u): u for u in people}
        opted, erased = self._repository.marks([*keyed, *legacy], list(keyed), self._clock.now_ms())
        found = {keyed[h] for h in opted | erased if h in keyed}
        for h in opted:
            if h in legacy:
                found.add(legacy[h])
                self._migrate(legacy[h])
        return found

    def _migrate(self, user_id: str) -> None:
        """An opt-out stored under the old unkeyed hash: store it keyed, drop the old one."""
        self._repository.add_opt_out(self.hash_of(user_id), self._clock.now_ms())
        self._repository.remove_opt_out(legacy_hash(user_id))
        with self._lock:
            self._hashes.discard(legacy_hash(user_id))
            self._hashes.add(self.hash_of(user_id))

    def _current(self) -> set[str]:
        now = self._clock.now_ms()
        with self._lock:
            if self._loaded_at is None or now - self._loaded_at >= CACHE_MS:
                self._hashes = self._repository.opted_out_hashes()
                self._loaded_at = now
            return self._hashes

    def opt_out(self, user_id: str) -> None:
        self._repository.add_opt_out(self.hash_of(user_id), self._clock.now_ms())
        with self._lock:
            self._hashes.add(self.hash_of(user_id))

    def opt_in(self, user_id: str) -> None:
        self._repository.remove_opt_out(self.hash_of(user_id))
        self._repository.remove_opt_out(legacy_hash(user_id))
        with self._lock:
            self._hashes.discard(self.hash_of(user_id))
            self._hashes.discard(legacy_hash(user_id))

"""A counting fake embedder for the bench: deterministic vectors, no network, and the number
of requests a hosted embedder would have been sent.

`requests` counts what OpenAIEmbedder would POST (one /embeddings request per OPENAI_BATCH
inputs of one `embed` call); `texts` the inputs embedded. The vectors are word hashes folded
into `dimensions` (texts sharing words are near), enough for the vector leg to rank.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Sequence

from botmemory.search.embeddings import OPENAI_BATCH


def requests_for(texts: int, batch: int = OPENAI_BATCH) -> int:
    """The /embeddings requests one embed call of `texts` inputs makes (0 for none)."""
    return -(-texts // batch) if texts > 0 else 0


def per_thousand(count: int, messages: int) -> float:
    """`count` per 1,000 messages (0 when no message was consumed)."""
    return 1000 * count / messages if messages > 0 else 0.0


class CountingEmbedder:
    """An Embedder (botmemory.search.embeddings) that counts its calls."""

    def __init__(self, dimensions: int = 32, name: str = "bench:counting") -> None:
        self.name = name
        self.dimensions = dimensions
        self.calls = 0  # embed() calls
        self.requests = 0  # /embeddings requests they stand for
        self.texts = 0
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        with self._lock:
            self.calls += 1
            self.requests += requests_for(len(texts))
            self.texts += len(texts)
        return [self._vector(text) for text in texts]

    def take(self) -> tuple[int, int]:
        """(requests, texts) since the last take."""
        with self._lock:
            taken = (self.requests, self.texts)
            self.calls = self.requests = self.texts = 0
        return taken

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for word in text.lower().split():
            digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
            vector[int.from_bytes(digest, "big") % self.dimensions] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]

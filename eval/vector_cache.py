"""Vectors kept on disk between eval runs (`make eval ARGS=--folds`): a passage or a question
embedded once is read back after, so a rerun only re-ranks. Keyed by the embedder's name
(its model and prefixes) and a hash of the text, so another model or another question text
(a rule that changes what is embedded) misses the cache rather than reading a wrong vector.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from botmemory.search.embeddings import Embedder

# Under eval/, gitignored: vectors are derived data, a few megabytes per conversation.
DEFAULT_FOLDER = Path(__file__).parent / ".vectors"
_SCHEMA = "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector TEXT NOT NULL)"


def cache_key(model: str, role: str, text: str) -> str:
    """The model, the role (passage or query: e5 embeds them differently) and the text."""
    return hashlib.sha256(f"{model}\0{role}\0{text}".encode()).hexdigest()


class CachedEmbedder:
    """An embedder whose vectors are read from, and written to, one SQLite file."""

    def __init__(self, inner: Embedder, folder: Path = DEFAULT_FOLDER) -> None:
        self._inner = inner
        self.name = inner.name
        self.dimensions = inner.dimensions
        folder.mkdir(parents=True, exist_ok=True)
        # Search embeds from a worker thread; two eval processes may share the file.
        self._conn = sqlite3.connect(
            folder / "vectors.sqlite3", timeout=30, check_same_thread=False
        )
        self._conn.execute(_SCHEMA)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        keys = [cache_key(self.name, "passage", t) for t in texts]
        found = self._read(keys)
        missing = [i for i, key in enumerate(keys) if key not in found]
        if missing:
            vectors = self._inner.embed([texts[i] for i in missing])
            self._write({keys[i]: v for i, v in zip(missing, vectors, strict=True)})
            found.update({keys[i]: v for i, v in zip(missing, vectors, strict=True)})
        return [found[key] for key in keys]

    def embed_query(self, text: str) -> list[float]:
        key = cache_key(self.name, "query", text)
        found = self._read([key])
        if key in found:
            return found[key]
        as_query = getattr(self._inner, "embed_query", None)
        vector = list(as_query(text)) if callable(as_query) else self._inner.embed([text])[0]
        self._write({key: vector})
        return vector

    def _read(self, keys: list[str]) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        with self._lock:
            for start in range(0, len(keys), 500):  # within SQLite's bound parameters
                chunk = keys[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT key, vector FROM vectors WHERE key IN ({marks})",  # nosec B608 # only '?' marks
                    chunk,
                ).fetchall()
                found.update({str(key): json.loads(vector) for key, vector in rows})
            self.hits += len(found)
            self.misses += len(keys) - len(found)
        return found

    def _write(self, vectors: dict[str, list[float]]) -> None:
        with self._lock, self._conn:
            self._conn.executemany(
                "INSERT OR REPLACE INTO vectors (key, vector) VALUES (?, ?)",
                [(key, json.dumps(vector)) for key, vector in vectors.items()],
            )

    def close(self) -> None:
        with self._lock:
            self._conn.close()

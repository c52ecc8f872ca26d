"""An OpenAI-compatible /embeddings endpoint on 127.0.0.1 whose vectors mean something: each
dimension is a concept, and a text's vector counts the words naming it, synonyms included,
so "ceramics" lands near "pottery" though they share no token. It can be told to fail
(`down`: 503 to every call) or to answer vectors of the wrong length (`returned_dimensions`),
as a model whose size is not EMBEDDING_DIMENSIONS does. `closed_url()` is an endpoint with
nothing listening: an embedding server that is down."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.fake_providers import request_json, send_json, serving

CONCEPTS: tuple[frozenset[str], ...] = (
    frozenset({"pottery", "ceramics", "clay", "kiln"}),
    frozenset({"marathon", "race", "running", "jog"}),
    frozenset({"lisbon", "portugal", "moved"}),
    frozenset({"workshop", "class", "lesson"}),
)


def concept_vector(text: str, dimensions: int) -> list[float]:
    words = [w.strip(".,?!").lower() for w in text.split()]
    counts = [float(sum(w in concept for w in words)) for concept in CONCEPTS]
    # Padded with a small constant so no vector is all zeros.
    return (counts + [0.01] * dimensions)[:dimensions]


class EmbeddingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.down = False
        self.returned_dimensions: int | None = None  # None: what the request asks for
        self.calls: list[list[str]] = []

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: EmbeddingServer

    def do_POST(self) -> None:
        body: Any = request_json(self)
        if self.server.down:
            send_json(self, {"error": {"message": "model unavailable"}}, status=503)
            return
        inputs = [str(text) for text in body["input"]]
        self.server.calls.append(inputs)
        size = self.server.returned_dimensions or int(body["dimensions"])
        data = [
            {"object": "embedding", "index": n, "embedding": concept_vector(text, size)}
            for n, text in enumerate(inputs)
        ]
        send_json(self, {"object": "list", "data": data})

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet


def closed_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens (the port was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def project_embedder(base_url: str, dimensions: int = 64) -> Any:
    """The project's own `openai:` embedder against `base_url`: one attempt, no waiting."""
    from botmemory.search.embeddings import OpenAIEmbedder

    return OpenAIEmbedder(
        "fake-embed",
        base_url=base_url,
        api_key=None,
        dimensions=dimensions,
        timeout_seconds=2.0,
        max_attempts=1,
        sleep=lambda _: None,
    )


@pytest.fixture(name="embedding_server")
def embedding_server_fixture() -> Iterator[EmbeddingServer]:
    """The server running on 127.0.0.1 for one test (tests/conftest.py offers it to all)."""
    with serving(EmbeddingServer()) as running:
        yield running

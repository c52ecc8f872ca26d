"""MEMORY_MODEL_TIMEOUT_SECONDS and MEMORY_MODEL_MAX_ATTEMPTS reach the Bedrock clients the
code builds (botmemory.providers.aws_clients), for the memory model and the Titan embedder alike.

A Stubber cannot see a client's Config, so these read `client.meta.config` of the client
the code itself creates, and count the attempts botocore makes on the wire. No request
leaves the process: a `before-send` handler answers every one.
"""

from __future__ import annotations

from typing import Any

import botocore.endpoint
import pytest
from botocore.exceptions import ReadTimeoutError

from botmemory.consolidation.model import MemoryModelError, build_memory_model
from botmemory.consolidation.model.bedrock import BedrockModel
from botmemory.consolidation.model.contract import ModelInput
from botmemory.providers.aws_clients import CONNECT_TIMEOUT_SECONDS, bedrock_config
from botmemory.search import EMBEDDING_TIMEOUT_SECONDS, build_search_index
from botmemory.search.embeddings import BedrockTitanEmbedder, EmbeddingError
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.settings.config import Settings, settings_from

MODEL = "bedrock:anthropic.claude-3-haiku-20240307-v1:0"
TITAN = "bedrock:amazon.titan-embed-text-v2:0"


def tuned(**extra: str) -> Settings:
    return settings_from(
        {
            "MEMORY_MODEL": MODEL,
            "MEMORY_MODEL_TIMEOUT_SECONDS": "12.5",
            "MEMORY_MODEL_MAX_ATTEMPTS": "5",
            **extra,
        }
    )


def model_client(settings: Settings) -> Any:
    model = build_memory_model(settings)
    assert isinstance(model, BedrockModel)
    return model._bedrock()


def embedder_client(settings: Settings) -> Any:
    index = build_search_index(settings)
    assert isinstance(index, SqliteSearchIndex)
    embedder = index._embedder
    assert isinstance(embedder, BedrockTitanEmbedder)
    return embedder._bedrock()


def test_the_memory_model_client_has_the_settings_timeout_and_attempts() -> None:
    config = model_client(tuned()).meta.config

    assert config.read_timeout == 12.5
    assert config.connect_timeout == CONNECT_TIMEOUT_SECONDS
    # total_max_attempts counts the first call, as MEMORY_MODEL_MAX_ATTEMPTS does.
    assert config.retries == {"mode": "standard", "total_max_attempts": 5}


def test_the_defaults_reach_the_memory_model_client_too() -> None:
    config = model_client(settings_from({"MEMORY_MODEL": MODEL})).meta.config

    assert config.read_timeout == 30.0
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}


def test_the_embedder_client_has_the_embedding_timeout_and_the_settings_attempts() -> None:
    settings = tuned(MEMORY_SEARCH_INDEX="sqlite::memory:", EMBEDDING_MODEL=TITAN)
    config = embedder_client(settings).meta.config

    # The indexing path's cap: the shorter of the model timeout and EMBEDDING_TIMEOUT_SECONDS.
    assert config.read_timeout == min(12.5, EMBEDDING_TIMEOUT_SECONDS)
    assert config.connect_timeout == CONNECT_TIMEOUT_SECONDS
    assert config.retries == {"mode": "standard", "total_max_attempts": 5}
    assert config.max_pool_connections >= 8  # its parallel calls each get a connection


def test_a_short_read_timeout_shortens_the_connect_timeout() -> None:
    config = bedrock_config(read_timeout_seconds=1.5, max_attempts=1)

    assert (config.connect_timeout, config.read_timeout) == (1.5, 1.5)
    assert config.retries == {"mode": "standard", "total_max_attempts": 1}


@pytest.mark.parametrize(
    ("read_timeout", "attempts"), [(0.0, 3), (-1.0, 3), (10.0, 0)], ids=["zero", "negative", "none"]
)
def test_a_config_without_time_or_attempts_is_refused(read_timeout: float, attempts: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        bedrock_config(read_timeout_seconds=read_timeout, max_attempts=attempts)


class TimingOut:
    """Answers every request on the wire with a read timeout, counting them."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: Any, **_: Any) -> None:
        self.calls += 1
        raise ReadTimeoutError(endpoint_url=request.url)


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """botocore's waits between attempts, recorded instead of slept."""
    recorded: list[float] = []
    monkeypatch.setattr(botocore.endpoint.time, "sleep", recorded.append)
    return recorded


def test_the_memory_model_makes_exactly_the_configured_attempts(waits: list[float]) -> None:
    model = build_memory_model(tuned(MEMORY_MODEL_MAX_ATTEMPTS="4"))
    assert isinstance(model, BedrockModel)
    wire = TimingOut()
    model._bedrock().meta.events.register("before-send.bedrock-runtime.Converse", wire)

    with pytest.raises(MemoryModelError, match="timeout"):
        model.consolidate(ModelInput(channel_id="1", observations=[]))

    assert wire.calls == 4
    assert len(waits) == 3


def test_the_embedder_makes_exactly_the_configured_attempts(waits: list[float]) -> None:
    settings = tuned(
        MEMORY_SEARCH_INDEX="sqlite::memory:", EMBEDDING_MODEL=TITAN, MEMORY_MODEL_MAX_ATTEMPTS="2"
    )
    index = build_search_index(settings)
    assert isinstance(index, SqliteSearchIndex)
    embedder = index._embedder
    assert isinstance(embedder, BedrockTitanEmbedder)
    wire = TimingOut()
    embedder._bedrock().meta.events.register("before-send.bedrock-runtime.InvokeModel", wire)

    with pytest.raises(EmbeddingError, match="timeout"):
        embedder.embed(["one text"])

    assert wire.calls == 2
    assert len(waits) == 1

"""The API keys of the OpenAI-compatible providers, given directly or by a Secrets Manager
secret (MEMORY_MODEL_API_KEY[_SECRET], EMBEDDING_MODEL_API_KEY[_SECRET]), by the one rule of
botmemory.settings.secrets that the bot token and the person hash key follow too.

Secrets Manager is moto's, in-process; the model and embeddings endpoint is a real HTTP
server on 127.0.0.1 that records the Authorization header it receives.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.parameters.base import DEFAULT_PROVIDERS
from moto import mock_aws

from botmemory.consolidation.model import build_memory_model
from botmemory.consolidation.model.contract import ModelInput
from botmemory.consolidation.model.openai_compat import OpenAICompatibleModel
from botmemory.search import build_search_index
from botmemory.search.embeddings import BedrockTitanEmbedder, OpenAIEmbedder
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.settings.config import (
    ConfigError,
    Settings,
    embedding_api_key,
    model_api_key,
    settings_from,
)
from botmemory.settings.secrets import SecretError, value_or_secret

MODEL_KEY = "sk-model-from-secrets-manager"
EMBEDDING_KEY = "sk-embedding-from-secrets-manager"
DIMENSIONS = 64


class Endpoint(ThreadingHTTPServer):
    """/v1/chat/completions and /v1/embeddings, answering well-formed, recording each
    request's path and Authorization header."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Answering)
        self.seen: list[tuple[str, str | None]] = []

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"


class Answering(BaseHTTPRequestHandler):
    server: Endpoint

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        if self.path.endswith("/embeddings"):
            data = [
                {"index": n, "embedding": [1.0] + [0.0] * (DIMENSIONS - 1)}
                for n in range(len(body["input"]))
            ]
            answer: dict[str, Any] = {"data": data}
        else:
            content = json.dumps(
                {"facts": [], "episode": {"summary": "Quiet.", "participants": []}}
            )
            answer = {
                "choices": [{"index": 0, "message": {"content": content}, "finish_reason": "stop"}]
            }
        raw = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    server = Endpoint()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # A fresh Powertools provider per test: its client is created inside moto, and its
    # cache carries no value from one test to the next.
    monkeypatch.delitem(DEFAULT_PROVIDERS, "secrets", raising=False)
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="us-east-1")


def openai_settings(endpoint: Endpoint, **env: str) -> Settings:
    return settings_from(
        {"MEMORY_MODEL": "openai:gpt-test", "MEMORY_MODEL_BASE_URL": endpoint.base_url, **env}
    )


def test_the_model_key_read_from_its_secret_is_the_bearer_token_sent(
    secrets: Any, endpoint: Endpoint
) -> None:
    arn = secrets.create_secret(Name="bot/model-key", SecretString=f" {MODEL_KEY}\n")["ARN"]
    model = build_memory_model(openai_settings(endpoint, MEMORY_MODEL_API_KEY_SECRET=arn))
    assert isinstance(model, OpenAICompatibleModel)

    model.consolidate(ModelInput(channel_id="1", observations=[]))

    assert endpoint.seen == [("/v1/chat/completions", f"Bearer {MODEL_KEY}")]


def test_the_embedding_key_read_from_its_secret_is_the_bearer_token_sent(
    secrets: Any, endpoint: Endpoint
) -> None:
    secrets.create_secret(Name="bot/embedding-key", SecretString=EMBEDDING_KEY)
    settings = openai_settings(
        endpoint,
        MEMORY_MODEL_API_KEY="sk-model-direct",
        MEMORY_SEARCH_INDEX="sqlite::memory:",
        EMBEDDING_MODEL="openai:embed-test",
        EMBEDDING_DIMENSIONS=str(DIMENSIONS),
        EMBEDDING_MODEL_API_KEY_SECRET="bot/embedding-key",
    )
    index = build_search_index(settings)
    assert isinstance(index, SqliteSearchIndex) and isinstance(index._embedder, OpenAIEmbedder)

    index._embedder.embed(["hello"])

    assert endpoint.seen == [("/v1/embeddings", f"Bearer {EMBEDDING_KEY}")]


def test_without_a_key_of_its_own_the_embedder_uses_the_model_key_secret(secrets: Any) -> None:
    secrets.create_secret(Name="bot/model-key", SecretString=MODEL_KEY)
    settings = settings_from({"MEMORY_MODEL_API_KEY_SECRET": "bot/model-key"})

    assert embedding_api_key(settings) == model_api_key(settings) == MODEL_KEY


def test_a_plain_key_still_serves_local_runs() -> None:
    settings = settings_from({"MEMORY_MODEL_API_KEY": "sk-local", "EMBEDDING_MODEL_API_KEY": "e"})

    assert (model_api_key(settings), embedding_api_key(settings)) == ("sk-local", "e")
    assert model_api_key(settings_from({})) is None  # no key at all: none is sent


@pytest.mark.parametrize("name", ["MEMORY_MODEL_API_KEY", "EMBEDDING_MODEL_API_KEY"])
def test_both_forms_of_a_key_are_a_one_line_error_naming_both(name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from({name: "sk-direct", f"{name}_SECRET": "bot/key"})

    message = str(caught.value)
    assert f"set {name} or {name}_SECRET, not both" in message
    assert "\n" not in message and "sk-direct" not in message


def test_a_missing_secret_fails_the_build_naming_the_variable_and_the_secret(
    secrets: Any, endpoint: Endpoint
) -> None:
    settings = openai_settings(endpoint, MEMORY_MODEL_API_KEY_SECRET="bot/no-such-key")

    with pytest.raises(SecretError) as caught:
        build_memory_model(settings)

    message = str(caught.value)
    assert message.startswith("MEMORY_MODEL_API_KEY_SECRET: could not read")
    assert "'bot/no-such-key'" in message and "\n" not in message
    assert endpoint.seen == []


def test_a_missing_embedding_secret_names_its_own_variable(secrets: Any) -> None:
    settings = settings_from(
        {
            "MEMORY_MODEL": "rules",
            "MEMORY_SEARCH_INDEX": "sqlite::memory:",
            "EMBEDDING_MODEL": "openai:embed-test",
            "EMBEDDING_MODEL_API_KEY_SECRET": "bot/absent",
        }
    )

    with pytest.raises(SecretError, match=r"^EMBEDDING_MODEL_API_KEY_SECRET: .*'bot/absent'"):
        build_search_index(settings)


def test_an_empty_secret_is_an_error_not_an_empty_key(secrets: Any) -> None:
    secrets.create_secret(Name="bot/blank", SecretString="  \n")
    settings = settings_from(
        {"MEMORY_MODEL": "openai:gpt-test", "MEMORY_MODEL_API_KEY_SECRET": "bot/blank"}
    )

    with pytest.raises(SecretError, match="holds no memory model API key"):
        build_memory_model(settings)


def test_the_secret_is_read_when_the_model_is_built_and_not_before(secrets: Any) -> None:
    # Reading the settings touches no secret: one that does not exist is not noticed yet.
    settings = settings_from(
        {"MEMORY_MODEL": "openai:gpt-test", "MEMORY_MODEL_API_KEY_SECRET": "bot/later"}
    )
    secrets.create_secret(Name="bot/later", SecretString=MODEL_KEY)

    assert isinstance(build_memory_model(settings), OpenAICompatibleModel)


def test_an_embedder_that_sends_no_key_never_reads_one(secrets: Any) -> None:
    # A Bedrock embedder's function need not have the right to an OpenAI key's secret.
    settings = settings_from(
        {
            "MEMORY_MODEL": "rules",
            "MEMORY_SEARCH_INDEX": "sqlite::memory:",
            "EMBEDDING_MODEL": "bedrock:amazon.titan-embed-text-v2:0",
            "EMBEDDING_MODEL_API_KEY_SECRET": "bot/absent",
        }
    )
    index = build_search_index(settings)

    assert isinstance(index, SqliteSearchIndex)
    assert isinstance(index._embedder, BedrockTitanEmbedder)


def test_a_powertools_cache_serves_a_second_read(secrets: Any) -> None:
    secrets.create_secret(Name="bot/cached", SecretString="first")
    assert value_or_secret("K", None, "bot/cached", what="key") == "first"
    secrets.put_secret_value(SecretId="bot/cached", SecretString="second")

    # Within max_age (DEFAULT_MAX_AGE_SECONDS) the cached value is served, no second call.
    assert value_or_secret("K", None, "bot/cached", what="key") == "first"


@pytest.mark.parametrize(
    ("value", "secret_id", "expected"),
    [(None, None, None), ("  ", None, None), (" v ", None, "v"), ("", " ", None)],
)
def test_the_rule_without_a_secret(
    value: str | None, secret_id: str | None, expected: str | None
) -> None:
    assert value_or_secret("K", value, secret_id, what="key") == expected


def test_the_caller_keeps_its_own_error_type() -> None:
    class Mine(ConfigError):
        pass

    with pytest.raises(Mine, match="set K or K_SECRET, not both"):
        value_or_secret("K", "a", "b", what="key", error=Mine)

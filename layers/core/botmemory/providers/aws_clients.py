"""The botocore settings of the Bedrock clients: one owner for timeouts and retries.

MEMORY_MODEL_TIMEOUT_SECONDS and MEMORY_MODEL_MAX_ATTEMPTS reach botocore here, for the
memory model (Converse) and the Titan embedder (InvokeModel) alike. Retries use botocore's
`standard` mode (exponential backoff with jitter on throttling, 5xx and transport errors);
`total_max_attempts` counts the first call, as MEMORY_MODEL_MAX_ATTEMPTS does for the
OpenAI-compatible providers (botocore's `max_attempts` would count retries only).

botocore's errors reach callers as their own error type, through `bedrock_failures`, with one
text: `<name> call failed: <code>: <message>`, or `<name> call failed: <what botocore said>`.

boto3 and botocore are imported inside the functions: a cold start that never calls
Bedrock does not load them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.config import Config
    from types_boto3_bedrock_runtime import BedrockRuntimeClient

# Reaching a regional endpoint takes milliseconds; a connection that has not opened by now
# will not, and waiting the whole read timeout for it only burns the function's time.
CONNECT_TIMEOUT_SECONDS = 3.0


def bedrock_config(
    *,
    read_timeout_seconds: float,
    max_attempts: int,
    max_pool_connections: int | None = None,
) -> Config:
    """Timeouts and retries for a bedrock-runtime client.

    The connect timeout is CONNECT_TIMEOUT_SECONDS, or the read timeout when that is shorter.
    `max_pool_connections` raises botocore's default pool (10) for callers that call in
    parallel from several threads.
    """
    if read_timeout_seconds <= 0:
        raise ValueError("read_timeout_seconds must be above 0")
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    from botocore.config import Config

    return Config(
        connect_timeout=min(CONNECT_TIMEOUT_SECONDS, read_timeout_seconds),
        read_timeout=read_timeout_seconds,
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        max_pool_connections=max(10, max_pool_connections or 0),
    )


def bedrock_runtime_client(
    *,
    region_name: str | None,
    read_timeout_seconds: float,
    max_attempts: int,
    max_pool_connections: int | None = None,
) -> BedrockRuntimeClient:
    """A bedrock-runtime client with `bedrock_config`'s timeouts and retries."""
    import boto3

    config = bedrock_config(
        read_timeout_seconds=read_timeout_seconds,
        max_attempts=max_attempts,
        max_pool_connections=max_pool_connections,
    )
    return boto3.client("bedrock-runtime", region_name=region_name, config=config)


@contextmanager
def bedrock_failures(
    name: str, error: type[Exception], *, message_chars: int | None = None
) -> Iterator[None]:
    """botocore's errors inside the block raised as `error`, named for the model `name`.

    With `message_chars`, the service's message is put on one line and cut to that many
    characters; without, it is quoted as sent.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except ClientError as exc:
        details = exc.response.get("Error", {})
        code = details.get("Code", "Unknown")
        message = details.get("Message", "")
        if message_chars is not None:
            message = " ".join(str(message).split())[:message_chars]
        raise error(f"{name} call failed: {code}: {message}") from exc
    except BotoCoreError as exc:  # connection and read timeouts, after botocore's retries
        raise error(f"{name} call failed: {exc}") from exc


class ConverseCaller:
    """Converse calls to one Bedrock model, named `bedrock:<model id>`: the client is built on
    first use with `bedrock_config`'s timeouts and retries, and botocore's errors, the
    client's building included, are raised as `error` (see `bedrock_failures`)."""

    def __init__(
        self,
        model_id: str,
        *,
        error: type[Exception],
        client: Any | None,
        region_name: str | None,
        read_timeout_seconds: float,
        max_attempts: int,
        message_chars: int | None = None,
    ) -> None:
        self.model_id = model_id
        self.name = f"bedrock:{model_id}"
        self._error = error
        self._client = client
        self._region_name = region_name
        self._read_timeout_seconds = read_timeout_seconds
        self._max_attempts = max_attempts
        self._message_chars = message_chars

    def client(self) -> Any:
        """The bedrock-runtime client, built on the first call (boto3 is slow on a cold start)."""
        if self._client is None:
            self._client = bedrock_runtime_client(
                region_name=self._region_name,
                read_timeout_seconds=self._read_timeout_seconds,
                max_attempts=self._max_attempts,
            )
        return self._client

    def converse(self, **params: Any) -> Any:
        """The Converse response for this model and `params` (everything but `modelId`)."""
        with bedrock_failures(self.name, self._error, message_chars=self._message_chars):
            return self.client().converse(modelId=self.model_id, **params)

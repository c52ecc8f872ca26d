"""The botocore settings of the Bedrock clients: one owner for timeouts and retries.

MEMORY_MODEL_TIMEOUT_SECONDS and MEMORY_MODEL_MAX_ATTEMPTS reach botocore here, for the
memory model (Converse) and the Titan embedder (InvokeModel) alike. Retries use botocore's
`standard` mode (exponential backoff with jitter on throttling, 5xx and transport errors);
`total_max_attempts` counts the first call, as MEMORY_MODEL_MAX_ATTEMPTS does for the
OpenAI-compatible providers (botocore's `max_attempts` would count retries only).

boto3 and botocore are imported inside the functions: a cold start that never calls
Bedrock does not load them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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

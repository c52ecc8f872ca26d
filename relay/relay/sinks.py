"""Where batches go: IngestFunction through Lambda async Invoke, or a local HTTP endpoint.

A sink answers every send with one of three outcomes. DELIVERED and REJECTED both end the
batch's life (a rejected body would be rejected again, so it is logged, never retried);
RETRY means the sink could not take it now and the batch must be kept.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx


class Outcome(enum.Enum):
    DELIVERED = "delivered"
    REJECTED = "rejected"
    RETRY = "retry"


@dataclass(frozen=True)
class Rejection:
    """One event the sink refused, as IngestFunction reports it."""

    index: int
    event: str
    reason: str


@dataclass(frozen=True)
class SendResult:
    outcome: Outcome
    reason: str = ""
    rejected: list[Rejection] = field(default_factory=list)


class Sink(Protocol):
    description: str

    def send(self, body: bytes) -> SendResult: ...

    def close(self) -> None: ...


# Invoke errors that no retry can fix: the body itself is refused.
_BODY_ERRORS = frozenset(
    {
        "InvalidRequestContentException",
        "RequestTooLargeException",
        "UnsupportedMediaTypeException",
    }
)


class LambdaSink:
    """Lambda async Invoke. Lambda answers 202 as soon as the event is queued.

    Async Invoke never returns the function's answer, so events IngestFunction rejects are
    visible only in its logs and metrics (EventsRejected), not here. Throttling, a missing
    function or missing permission are retried and spooled: an operator can fix them and
    nothing is lost meanwhile.
    """

    def __init__(self, client: Any, function_name: str) -> None:
        self._client = client
        self._function_name = function_name
        self.description = f"Lambda {function_name}"

    def send(self, body: bytes) -> SendResult:
        # botocore is imported here so the HTTP path runs without it.
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self._client.invoke(
                FunctionName=self._function_name,
                InvocationType="Event",
                Payload=body,
            )
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            message = error.response.get("Error", {}).get("Message", "")
            reason = f"{code}: {message}"[:300]
            if code in _BODY_ERRORS:
                return SendResult(Outcome.REJECTED, reason)
            return SendResult(Outcome.RETRY, reason)
        except BotoCoreError as error:
            return SendResult(Outcome.RETRY, f"{type(error).__name__}: {error}"[:300])
        status = response.get("StatusCode")
        if status == 202:
            return SendResult(Outcome.DELIVERED)
        return SendResult(Outcome.RETRY, f"unexpected Invoke status {status}")

    def close(self) -> None:
        close = getattr(self._client, "close", None)
        if callable(close):
            close()


def lambda_client(region: str | None = None, timeout_seconds: float = 10.0) -> Any:
    """A Lambda client that fails fast: the forwarder does its own retries and spooling."""
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=min(timeout_seconds, 5.0),
        read_timeout=timeout_seconds,
        retries={"total_max_attempts": 2, "mode": "standard"},
    )
    return boto3.client("lambda", region_name=region, config=config)


# Answers that mean "this body is wrong", as opposed to "the endpoint is unwell".
_HTTP_BODY_ERRORS = frozenset({400, 413, 422})


class HttpSink:
    """HTTP POST of the same JSON to a local ingest endpoint (`make dev` serves /ingest).

    Unlike async Invoke, the endpoint answers with IngestFunction's result, so events it
    rejected come back with their reasons and are logged by the forwarder.
    """

    def __init__(self, url: str, timeout_seconds: float = 10.0) -> None:
        self._url = url
        self._client = httpx.Client(timeout=timeout_seconds)
        self.description = url  # the URL names its scheme

    def send(self, body: bytes) -> SendResult:
        try:
            response = self._client.post(
                self._url, content=body, headers={"content-type": "application/json"}
            )
        except httpx.HTTPError as error:
            return SendResult(Outcome.RETRY, f"{type(error).__name__}: {error}"[:300])
        answer = _json_or_none(response.content)
        if 200 <= response.status_code < 300:
            return SendResult(Outcome.DELIVERED, rejected=_rejections(answer))
        reason = f"HTTP {response.status_code}"
        if isinstance(answer, dict) and answer.get("error"):
            reason += f": {str(answer['error'])[:300]}"
        if response.status_code in _HTTP_BODY_ERRORS:
            return SendResult(Outcome.REJECTED, reason)
        return SendResult(Outcome.RETRY, reason)

    def close(self) -> None:
        self._client.close()


def _json_or_none(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return None


def _rejections(answer: Any) -> list[Rejection]:
    if not isinstance(answer, dict) or not isinstance(answer.get("rejected"), list):
        return []
    found = []
    for entry in answer["rejected"]:
        if isinstance(entry, dict):
            index = entry.get("index")
            found.append(
                Rejection(
                    index=index if isinstance(index, int) else -1,
                    event=str(entry.get("event", "?")),
                    reason=str(entry.get("reason", ""))[:300],
                )
            )
    return found

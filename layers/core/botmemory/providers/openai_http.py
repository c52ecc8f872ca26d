"""POSTs to an OpenAI-compatible endpoint (chat completions, embeddings) under one set of rules:
a bearer key only when there is one, bounded attempts, retries on 408/429/5xx, timeouts and
transport errors with jittered exponential backoff or the server's numeric Retry-After, an
immediate failure on any other 4xx, and error text that is short and never carries the key.
`ChatCompletionsClient` is what the two chat-completions providers (the chat model and the
memory model) share: the constructor, with each one's own defaults.

httpx is imported at the top: only the OpenAI providers import this module, and they do so
lazily, when one is chosen and used, so a cold start that never calls them does not pay for it.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import httpx

_BODY_EXCERPT_CHARS = 300

# 408 and 429 are the only client errors worth repeating: the request itself was fine.
_RETRYABLE_CLIENT_STATUSES = frozenset({408, 429})


# Refusals that say this request is what is wrong (its body, its size), not the endpoint
# or the deployment's key or model name, which would refuse every request alike.
_REQUEST_FAULT_STATUSES = frozenset({400, 413, 422})


class EndpointError(RuntimeError):
    """The endpoint rejected the request, or every attempt failed; the text is safe to log.
    `request_fault`: the endpoint refused this request's content (another may pass)."""

    def __init__(self, message: str, *, request_fault: bool = False) -> None:
        super().__init__(message)
        self.request_fault = request_fault


@dataclass(frozen=True)
class RetryPolicy:
    """The waits between attempts. Each caller bounds them to what its own path can afford."""

    backoff_base_seconds: float
    backoff_cap_seconds: float
    jitter_seconds: float
    max_retry_after_seconds: float

    def backoff(self, attempt: int) -> float:
        # Jitter keeps concurrent callers from retrying in lockstep.
        base: float = min(self.backoff_base_seconds * 2**attempt, self.backoff_cap_seconds)
        return base + random.uniform(0, self.jitter_seconds)  # nosec B311 # retry jitter, not a secret

    def retry_after(self, response: httpx.Response) -> float | None:
        """The server's requested wait in seconds, capped; None when absent or not a number."""
        raw = response.headers.get("Retry-After")
        if raw is None:
            return None
        try:
            seconds = float(raw.strip())
        except ValueError:
            return None  # the HTTP-date form: our own backoff instead
        if math.isnan(seconds) or seconds < 0:
            return None
        return min(seconds, self.max_retry_after_seconds)


class _Failure(NamedTuple):
    """One attempt that is worth repeating: what went wrong, and any wait the server asked."""

    problem: str
    wait: float | None


class OpenAIEndpoint:
    """One URL of an OpenAI-compatible server, POSTed to with bounded retries."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        api_key: str | None,
        timeout_seconds: float,
        max_attempts: int,
        retry: RetryPolicy,
        client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.name = name
        self.url = url
        self._api_key = api_key
        self._timeout_seconds = timeout_seconds
        self._max_attempts = max_attempts
        self._retry = retry
        self._client = client
        self._owns_client = client is None
        self._transport = transport
        self._sleep = sleep

    @property
    def client(self) -> httpx.Client | None:
        """The HTTP client, or None while no request has needed one."""
        return self._client

    def close(self) -> None:
        # A client handed in belongs to whoever made it; only one built here is closed here.
        if self._client is not None and self._owns_client:
            self._client.close()
            self._client = None

    def post(self, body: dict[str, Any]) -> httpx.Response:
        """The first 2xx answer to `body` as JSON; EndpointError when there is none."""
        problem = "no attempt made"
        for attempt in range(self._max_attempts):
            outcome = self._attempt(body)
            if isinstance(outcome, httpx.Response):
                return outcome
            problem = outcome.problem
            if attempt < self._max_attempts - 1:
                wait = outcome.wait
                self._sleep(self._retry.backoff(attempt) if wait is None else wait)
        raise EndpointError(f"{self.name} failed after {self._max_attempts} attempts: {problem}")

    def excerpt(self, response: httpx.Response) -> str:
        """The start of a response body, fit for an error message."""
        try:
            text = response.text
        except Exception:  # undecodable body: the status code still says enough
            return "<unreadable body>"
        return self.clip(text) or "<empty body>"

    def clip(self, text: str) -> str:
        """`text` on one line, cut short and with the API key masked."""
        text = self._redact(" ".join(text.split()))
        if len(text) > _BODY_EXCERPT_CHARS:
            return text[:_BODY_EXCERPT_CHARS] + "…"
        return text

    # -- one attempt ---------------------------------------------------------------------------

    def _http(self) -> httpx.Client:
        # Built on first use: constructing a client costs time a cold start should not pay
        # when the caller never reaches the endpoint.
        if self._client is None:
            self._client = httpx.Client(timeout=self._timeout_seconds, transport=self._transport)
        return self._client

    def _headers(self) -> dict[str, str]:
        # Local servers (Ollama, vLLM) often run keyless: send no header rather than an empty one.
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _attempt(self, body: dict[str, Any]) -> httpx.Response | _Failure:
        try:
            response = self._http().post(self.url, json=body, headers=self._headers())
        except httpx.TimeoutException as exc:  # before TransportError, which it subclasses
            problem = f"timed out after {self._timeout_seconds:g} s ({type(exc).__name__})"
            return _Failure(problem, None)
        except httpx.TransportError as exc:
            problem = f"transport error ({type(exc).__name__}: {self._redact(str(exc))})"
            return _Failure(problem, None)
        status = response.status_code
        if 200 <= status < 300:
            return response
        problem = f"HTTP {status}: {self.excerpt(response)}"
        if status not in _RETRYABLE_CLIENT_STATUSES and status < 500:
            # The request itself is wrong (auth, model, schema): repeating it wastes time.
            raise EndpointError(
                f"{self.name} rejected the request: {problem}",
                request_fault=status in _REQUEST_FAULT_STATUSES,
            )
        # Retry-After means the same on any retryable status (429, 503...): honour it on all.
        return _Failure(problem, self._retry.retry_after(response))

    def _redact(self, text: str) -> str:
        # Some servers echo the bad key back in their 401 body; error messages end up in logs.
        return text.replace(self._api_key, "***") if self._api_key else text


@dataclass(frozen=True)
class ChatDefaults:
    """What a chat-completions provider uses where its caller says nothing: each path bounds
    its own waits (an answer someone waits for, a consolidation batch in the background)."""

    timeout_seconds: float
    max_attempts: int
    max_output_tokens: int
    retry: RetryPolicy


class ChatCompletionsClient:
    """The part every chat-completions provider shares: the model it names, its output cap
    and the endpoint it POSTs to (`<base_url>/chat/completions`, named `openai:<model>`).
    A subclass sets DEFAULTS and builds its request bodies and reads the answers."""

    DEFAULTS: ClassVar[ChatDefaults]

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None,
        timeout_seconds: float | None = None,
        max_attempts: int | None = None,
        max_output_tokens: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        defaults = self.DEFAULTS
        self._model = model
        self._max_output_tokens = (
            defaults.max_output_tokens if max_output_tokens is None else max_output_tokens
        )
        self._endpoint = OpenAIEndpoint(
            f"openai:{model}",
            f"{base_url.rstrip('/')}/chat/completions",
            api_key=api_key,
            timeout_seconds=defaults.timeout_seconds
            if timeout_seconds is None
            else timeout_seconds,
            max_attempts=defaults.max_attempts if max_attempts is None else max_attempts,
            retry=defaults.retry,
            transport=transport,
            sleep=sleep,
        )
        self.name = self._endpoint.name

    def close(self) -> None:
        self._endpoint.close()

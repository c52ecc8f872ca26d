"""A memory model behind any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama).

Structured output uses `response_format: json_schema` in strict mode, so a compliant server can
only produce JSON shaped like the contract; the answer is still validated here, because not
every compatible server enforces the schema.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from typing import Any

import httpx

from botmemory.memory_model.contract import (
    ANSWER_SCHEMA,
    INSTRUCTIONS,
    ConsolidationAnswer,
    MemoryModelError,
    ModelInput,
    parse_answer,
    render_batch,
)

# Waits are bounded so a misbehaving server cannot hold a Lambda for its whole timeout.
_MAX_RETRY_AFTER_SECONDS = 60.0
_BACKOFF_BASE_SECONDS = 0.5
_BACKOFF_CAP_SECONDS = 8.0
_JITTER_SECONDS = 0.25
_BODY_EXCERPT_CHARS = 300

# 408 and 429 are the only client errors worth repeating: the request itself was fine.
_RETRYABLE_CLIENT_STATUSES = frozenset({408, 429})


class OpenAICompatibleModel:
    """One chat-completions call per batch, with bounded retries on transient failures."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None,
        timeout_seconds: float = 30.0,
        max_attempts: int = 3,
        max_output_tokens: int = 2000,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.name = f"openai:{model}"
        self._model = model
        self._url = f"{base_url.rstrip('/')}/chat/completions"
        self._api_key = api_key
        self._timeout_seconds = timeout_seconds
        self._max_attempts = max_attempts
        self._max_output_tokens = max_output_tokens
        self._sleep = sleep
        self._transport = transport
        self._client: httpx.Client | None = None

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        response = self._post_with_retries(self._request_body(batch))
        return self._parse_response(response)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- request -------------------------------------------------------------------------------

    def _http(self) -> httpx.Client:
        # Built on first use: constructing a client costs time a cold start should not pay
        # when the handler never reaches the model.
        if self._client is None:
            self._client = httpx.Client(timeout=self._timeout_seconds, transport=self._transport)
        return self._client

    def _request_body(self, batch: ModelInput) -> dict[str, Any]:
        return {
            "model": self._model,
            "messages": [
                {"role": "system", "content": INSTRUCTIONS},
                {"role": "user", "content": render_batch(batch)},
            ],
            "temperature": 0,
            "max_tokens": self._max_output_tokens,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "consolidation", "strict": True, "schema": ANSWER_SCHEMA},
            },
        }

    def _headers(self) -> dict[str, str]:
        # Local servers (Ollama, vLLM) often run keyless: send no header rather than an empty one.
        if self._api_key:
            return {"Authorization": f"Bearer {self._api_key}"}
        return {}

    def _post_with_retries(self, body: dict[str, Any]) -> httpx.Response:
        last_problem = "no attempt made"
        for attempt in range(self._max_attempts):
            is_last = attempt == self._max_attempts - 1
            try:
                response = self._http().post(self._url, json=body, headers=self._headers())
            except httpx.TimeoutException as exc:
                last_problem = f"timed out after {self._timeout_seconds:g} s ({type(exc).__name__})"
            except httpx.TransportError as exc:
                last_problem = f"transport error ({type(exc).__name__}: {self._redact(str(exc))})"
            else:
                status = response.status_code
                if 200 <= status < 300:
                    return response
                last_problem = f"HTTP {status}: {self._excerpt(response)}"
                if status not in _RETRYABLE_CLIENT_STATUSES and status < 500:
                    # The request itself is wrong (auth, model, schema): repeating it wastes time.
                    raise MemoryModelError(f"{self.name} rejected the request: {last_problem}")
                if status == 429 and not is_last:
                    wait = self._retry_after(response)
                    self._sleep(self._backoff(attempt) if wait is None else wait)
                    continue
            if not is_last:
                self._sleep(self._backoff(attempt))
        raise MemoryModelError(
            f"{self.name} failed after {self._max_attempts} attempts: {last_problem}"
        )

    @staticmethod
    def _backoff(attempt: int) -> float:
        # Jitter keeps concurrent consolidations from retrying in lockstep.
        base: float = min(_BACKOFF_BASE_SECONDS * 2**attempt, _BACKOFF_CAP_SECONDS)
        return base + random.uniform(0, _JITTER_SECONDS)

    @staticmethod
    def _retry_after(response: httpx.Response) -> float | None:
        """The server's requested wait in seconds, capped; None when absent or not a number."""
        raw = response.headers.get("Retry-After")
        if raw is None:
            return None
        try:
            seconds = float(raw.strip())
        except ValueError:
            return None  # an HTTP-date form: fall back to our own backoff
        if math.isnan(seconds) or seconds < 0:
            return None
        return min(seconds, _MAX_RETRY_AFTER_SECONDS)

    # -- response ------------------------------------------------------------------------------

    def _parse_response(self, response: httpx.Response) -> ConsolidationAnswer:
        try:
            payload = response.json()
        except ValueError as exc:
            raise MemoryModelError(
                f"{self.name} returned a body that is not JSON: {self._excerpt(response)}"
            ) from exc

        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise MemoryModelError(f"{self.name} returned no choices: {self._excerpt(response)}")
        choice = choices[0]

        # A truncated answer may still parse as JSON by luck; it is never complete, so refuse it.
        if choice.get("finish_reason") == "length":
            raise MemoryModelError(
                f"{self.name} answer truncated (max_tokens={self._max_output_tokens})"
            )

        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, str) or not content.strip():
            refusal = message.get("refusal") if isinstance(message, dict) else None
            detail = f" (refusal: {self._clip(str(refusal))})" if refusal else ""
            raise MemoryModelError(f"{self.name} returned no message content{detail}")

        try:
            json.loads(content)
        except ValueError as exc:
            raise MemoryModelError(
                f"{self.name} answered with content that is not JSON: {self._clip(content)}"
            ) from exc
        return parse_answer(content)

    # -- error text ----------------------------------------------------------------------------

    def _excerpt(self, response: httpx.Response) -> str:
        try:
            text = response.text
        except Exception:  # undecodable body: the status code still says enough
            return "<unreadable body>"
        return self._clip(text) or "<empty body>"

    def _clip(self, text: str) -> str:
        text = self._redact(" ".join(text.split()))
        if len(text) > _BODY_EXCERPT_CHARS:
            return text[:_BODY_EXCERPT_CHARS] + "…"
        return text

    def _redact(self, text: str) -> str:
        # Some servers echo the bad key back in their 401 body; error messages end up in logs.
        if self._api_key:
            return text.replace(self._api_key, "***")
        return text

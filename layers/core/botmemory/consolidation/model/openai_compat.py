"""A memory model behind any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama).

Structured output uses `response_format: json_schema` in strict mode, so a compliant server can
only produce JSON shaped like the contract; the answer is still validated here, because not
every compatible server enforces the schema.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from botmemory.consolidation.model.contract import (
    ANSWER_SCHEMA,
    INSTRUCTIONS,
    RECOMPRESS_INSTRUCTIONS,
    RECOMPRESS_SCHEMA,
    ConsolidationAnswer,
    MemoryModelError,
    ModelInput,
    ModelUnavailable,
    parse_answer,
    parse_recompression,
    render_batch,
    render_recompression,
)
from botmemory.providers.openai_http import (
    ChatCompletionsClient,
    ChatDefaults,
    EndpointError,
    RetryPolicy,
)


class OpenAICompatibleModel(ChatCompletionsClient):
    """One chat-completions call per batch, with bounded retries on transient failures."""

    # Waits are bounded so a misbehaving server cannot hold a Lambda for its whole timeout.
    DEFAULTS = ChatDefaults(
        timeout_seconds=30.0,
        max_attempts=3,
        max_output_tokens=2000,
        retry=RetryPolicy(
            backoff_base_seconds=0.5,
            backoff_cap_seconds=8.0,
            jitter_seconds=0.25,
            max_retry_after_seconds=60.0,
        ),
    )

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        try:
            response = self._endpoint.post(self._request_body(batch))
        except EndpointError as exc:
            failure = MemoryModelError if exc.request_fault else ModelUnavailable
            raise failure(str(exc)) from exc
        return parse_answer(self._content(response))

    def recompress(self, summary: str, target_chars: int) -> str:
        body = self._body(
            RECOMPRESS_INSTRUCTIONS,
            render_recompression(summary, target_chars),
            "recompression",
            RECOMPRESS_SCHEMA,
        )
        try:
            response = self._endpoint.post(body)
        except EndpointError as exc:
            raise MemoryModelError(str(exc)) from exc
        return parse_recompression(self._content(response))

    # -- request -------------------------------------------------------------------------------

    def _request_body(self, batch: ModelInput) -> dict[str, Any]:
        return self._body(INSTRUCTIONS, render_batch(batch), "consolidation", ANSWER_SCHEMA)

    def _body(
        self, instructions: str, user: str, schema_name: str, schema: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "model": self._model,
            "messages": [
                {"role": "system", "content": instructions},
                {"role": "user", "content": user},
            ],
            "temperature": 0,
            "max_tokens": self._max_output_tokens,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "strict": True, "schema": schema},
            },
        }

    # -- response ------------------------------------------------------------------------------

    def _content(self, response: httpx.Response) -> str:
        """The JSON text of the answer's first choice; MemoryModelError when there is none."""
        excerpt, clip = self._endpoint.excerpt, self._endpoint.clip
        try:
            payload = response.json()
        except ValueError as exc:
            raise MemoryModelError(
                f"{self.name} returned a body that is not JSON: {excerpt(response)}"
            ) from exc

        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise MemoryModelError(f"{self.name} returned no choices: {excerpt(response)}")
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
            detail = f" (refusal: {clip(str(refusal))})" if refusal else ""
            raise MemoryModelError(f"{self.name} returned no message content{detail}")

        try:
            json.loads(content)
        except ValueError as exc:
            raise MemoryModelError(
                f"{self.name} answered with content that is not JSON: {clip(content)}"
            ) from exc
        return content

"""A chat model behind any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama).

Tools are offered as `type: function`; a tool call's `arguments` is a JSON string the model
wrote, parsed defensively (anything but a JSON object becomes {}). Tool results go back as
the assistant message with its `tool_calls`, then one `role: "tool"` message per call
(`tool_call_id`). Transport, retries and error text are botmemory.providers.openai_http's.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from botmemory.answering.chat.contract import (
    ChatModelError,
    ChatReply,
    ChatRequest,
    ChatTurn,
    ToolCall,
    effective_max_tokens,
    generated_call_id,
    parsed_arguments,
    usable_call_ids,
)
from botmemory.providers.openai_http import (
    ChatCompletionsClient,
    ChatDefaults,
    EndpointError,
    RetryPolicy,
)


class OpenAIChatModel(ChatCompletionsClient):
    """One chat-completions call per model turn, with bounded retries on transient failures."""

    # Someone is waiting for the answer: waits stay short, and a server asking for a long
    # pause gets the apology instead.
    DEFAULTS = ChatDefaults(
        timeout_seconds=20.0,
        max_attempts=2,
        max_output_tokens=800,
        retry=RetryPolicy(
            backoff_base_seconds=0.5,
            backoff_cap_seconds=4.0,
            jitter_seconds=0.25,
            max_retry_after_seconds=10.0,
        ),
    )

    def reply(self, request: ChatRequest) -> ChatReply:
        try:
            response = self._endpoint.post(self._request_body(request))
        except EndpointError as exc:
            raise ChatModelError(str(exc)) from exc
        return self._parse_response(response)

    # -- request -------------------------------------------------------------------------------

    def _request_body(self, request: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._model,
            "messages": [
                {"role": "system", "content": request.system},
                *(message for turn in request.turns for message in chat_messages(turn)),
            ],
            "max_tokens": effective_max_tokens(request, self._max_output_tokens),
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
                for tool in request.tools
            ]
        return body

    # -- response ------------------------------------------------------------------------------

    def _parse_response(self, response: httpx.Response) -> ChatReply:
        message, finish_reason = self._message(response)
        text = _text(message)
        # A call cut off by the token limit may carry half its arguments: it is not applied.
        # Cut text is still an answer, better than an apology.
        calls = [] if finish_reason == "length" else _tool_calls(message.get("tool_calls"))
        if not text and not calls:
            raise ChatModelError(
                f"{self.name} returned neither text nor a tool call "
                f"(finish_reason={finish_reason!r})"
            )
        return ChatReply(text=text, tool_calls=calls)

    def _message(self, response: httpx.Response) -> tuple[dict[str, Any], Any]:
        """The first choice's message and finish reason; ChatModelError when there is none."""
        excerpt = self._endpoint.excerpt
        try:
            payload = response.json()
        except ValueError as exc:
            raise ChatModelError(
                f"{self.name} returned a body that is not JSON: {excerpt(response)}"
            ) from exc
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ChatModelError(f"{self.name} returned no choices: {excerpt(response)}")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise ChatModelError(f"{self.name} returned a choice without a message")
        return message, choices[0].get("finish_reason")


def chat_messages(turn: ChatTurn) -> list[dict[str, Any]]:
    """One turn as chat-completions messages: a tool turn is one message per result."""
    if turn.role == "tool":
        return [
            {"role": "tool", "tool_call_id": result.call_id, "content": result.content}
            for result in turn.tool_results
        ]
    if not turn.tool_calls:
        return [{"role": turn.role, "content": turn.content}]
    return [
        {
            "role": "assistant",
            # The API's own form for "no text, only calls".
            "content": turn.content or None,
            "tool_calls": [
                {
                    "type": "function",
                    "id": call.id,
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in turn.tool_calls
            ],
        }
    ]


def _text(message: dict[str, Any]) -> str:
    """The message's text: a string, or (some servers) a list of text parts; a refusal is the
    model's answer to the person when there is no content."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    if isinstance(content, str) and content.strip():
        return content.strip()
    refusal = message.get("refusal")
    return refusal.strip() if isinstance(refusal, str) else ""


def _tool_calls(raw: Any) -> list[ToolCall]:
    """The function calls of a message; an entry without a function name is skipped."""
    if not isinstance(raw, list):
        return []
    calls: list[ToolCall] = []
    for index, item in enumerate(raw):
        function = item.get("function") if isinstance(item, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(function, dict) or not isinstance(name, str) or not name:
            continue
        call_id = item.get("id")
        calls.append(
            ToolCall(
                id=call_id if isinstance(call_id, str) and call_id else generated_call_id(index),
                name=name,
                arguments=parsed_arguments(function.get("arguments")),
            )
        )
    return usable_call_ids(calls)

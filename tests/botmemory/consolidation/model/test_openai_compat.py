"""OpenAICompatibleModel against a real HTTP server on 127.0.0.1 that plays scripted answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from botmemory.consolidation.model.contract import (
    ANSWER_SCHEMA,
    INSTRUCTIONS,
    KnownFact,
    MemoryModelError,
    ModelInput,
    ModelUnavailable,
    NumberedObservation,
)
from botmemory.consolidation.model.openai_compat import OpenAICompatibleModel
from tests.support.fake_providers import Received, Scripted, ScriptHandler, ScriptServer, serving  # noqa: F401

API_KEY = "sk-test-secret-123"

GOOD_ANSWER: dict[str, Any] = {
    "facts": [
        {
            "user_id": "111",
            "text": "Ada prefers Rust for embedded work.",
            "kind": "preference",
            "evidence": [1],
            "supersedes": ["f-old"],
        }
    ],
    "episode": {"summary": "Ada talked about Rust.", "participants": ["111", "222"]},
}


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    with serving(ScriptServer()) as srv:
        yield srv


class SleepRecorder:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def completion(content: str | None, finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def batch() -> ModelInput:
    return ModelInput(
        channel_id="c-42",
        observations=[
            NumberedObservation(
                number=1,
                author_id="111",
                author_name="Ada",
                kind="msg",
                text="I now prefer Rust for embedded work",
            ),
            NumberedObservation(
                number=2, author_id="222", author_name="Bob", kind="msg", text="nice"
            ),
        ],
        facts=[KnownFact(fact_id="f-old", user_id="111", kind="preference", text="Ada likes C.")],
        pins=["Be kind."],
    )


def make_model(
    server: ScriptServer,
    sleep: SleepRecorder,
    *,
    api_key: str | None = API_KEY,
    max_attempts: int = 3,
    timeout_seconds: float = 5.0,
) -> OpenAICompatibleModel:
    return OpenAICompatibleModel(
        "gpt-test",
        base_url=server.base_url,
        api_key=api_key,
        timeout_seconds=timeout_seconds,
        max_attempts=max_attempts,
        max_output_tokens=1234,
        sleep=sleep,
    )


def test_success_sends_the_contract_and_parses_the_answer(server: ScriptServer) -> None:
    server.script.append(Scripted(200, completion(json.dumps(GOOD_ANSWER))))
    sleep = SleepRecorder()
    model = make_model(server, sleep)

    answer = model.consolidate(batch())

    assert model.name == "openai:gpt-test"
    assert answer.facts[0].user_id == "111"
    assert answer.facts[0].evidence == [1]
    assert answer.facts[0].supersedes == ["f-old"]
    assert answer.episode.participants == ["111", "222"]
    assert sleep.calls == []

    assert len(server.requests) == 1
    req = server.requests[0]
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {API_KEY}"
    body = req.body
    assert body["model"] == "gpt-test"
    assert body["temperature"] == 0
    assert body["max_tokens"] == 1234
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "consolidation", "strict": True, "schema": ANSWER_SCHEMA},
    }
    system, user = body["messages"]
    assert system == {"role": "system", "content": INSTRUCTIONS}
    assert user["role"] == "user"
    assert '#1 [msg] "Ada" (user_id 111): "I now prefer Rust for embedded work"' in user["content"]
    assert '#2 [msg] "Bob" (user_id 222): "nice"' in user["content"]
    assert '- f-old (user_id 111, preference): "Ada likes C."' in user["content"]
    assert '- "Be kind."' in user["content"]


def test_no_authorization_header_without_a_key(server: ScriptServer) -> None:
    server.script.append(Scripted(200, completion(json.dumps(GOOD_ANSWER))))
    model = make_model(server, SleepRecorder(), api_key=None)

    model.consolidate(batch())

    assert "authorization" not in server.requests[0].headers


def test_429_honours_retry_after_then_succeeds(server: ScriptServer) -> None:
    server.script.append(Scripted(429, '{"error": "slow down"}', {"Retry-After": "2"}))
    server.script.append(Scripted(200, completion(json.dumps(GOOD_ANSWER))))
    sleep = SleepRecorder()

    answer = make_model(server, sleep).consolidate(batch())

    assert sleep.calls == [2.0]
    assert len(server.requests) == 2
    assert answer.episode.summary == "Ada talked about Rust."


def test_429_retry_after_is_capped(server: ScriptServer) -> None:
    server.script.append(Scripted(429, "{}", {"Retry-After": "3600"}))
    server.script.append(Scripted(200, completion(json.dumps(GOOD_ANSWER))))
    sleep = SleepRecorder()

    make_model(server, sleep).consolidate(batch())

    assert sleep.calls == [60.0]


def test_429_without_retry_after_backs_off(server: ScriptServer) -> None:
    server.script.append(Scripted(429, "{}"))
    server.script.append(Scripted(200, completion(json.dumps(GOOD_ANSWER))))
    sleep = SleepRecorder()

    make_model(server, sleep).consolidate(batch())

    assert len(sleep.calls) == 1
    assert 0.5 <= sleep.calls[0] < 1.0  # 0.5·2^0 plus small jitter


def test_503_then_success(server: ScriptServer) -> None:
    server.script.append(Scripted(503, "upstream unavailable"))
    server.script.append(Scripted(200, completion(json.dumps(GOOD_ANSWER))))
    sleep = SleepRecorder()

    answer = make_model(server, sleep).consolidate(batch())

    assert len(server.requests) == 2
    assert len(sleep.calls) == 1
    assert answer.facts[0].text == "Ada prefers Rust for embedded work."


def test_persistent_500_gives_up_after_max_attempts(server: ScriptServer) -> None:
    for _ in range(4):
        server.script.append(Scripted(500, '{"error": "boom"}'))
    sleep = SleepRecorder()

    with pytest.raises(MemoryModelError) as info:
        make_model(server, sleep, max_attempts=3).consolidate(batch())

    assert len(server.requests) == 3
    # Exponential backoff between attempts, none after the last one.
    assert len(sleep.calls) == 2
    assert 0.5 <= sleep.calls[0] < 1.0
    assert 1.0 <= sleep.calls[1] < 1.5
    message = str(info.value)
    assert "3 attempts" in message
    assert "500" in message
    assert "boom" in message


def test_timeout_gives_up_after_max_attempts(server: ScriptServer) -> None:
    for _ in range(2):
        server.script.append(Scripted(200, completion(json.dumps(GOOD_ANSWER)), delay=2.0))
    sleep = SleepRecorder()

    with pytest.raises(MemoryModelError, match="timed out"):
        make_model(server, sleep, max_attempts=2, timeout_seconds=0.2).consolidate(batch())

    assert len(server.requests) == 2
    assert len(sleep.calls) == 1


def test_body_not_json_is_not_retried(server: ScriptServer) -> None:
    server.script.append(Scripted(200, "<html>gateway says hi</html>"))

    with pytest.raises(MemoryModelError, match="not JSON"):
        make_model(server, SleepRecorder()).consolidate(batch())

    assert len(server.requests) == 1


def test_missing_choices_is_not_retried(server: ScriptServer) -> None:
    server.script.append(Scripted(200, {"id": "x", "choices": []}))

    with pytest.raises(MemoryModelError, match="no choices"):
        make_model(server, SleepRecorder()).consolidate(batch())

    assert len(server.requests) == 1


def test_content_not_json_is_not_retried(server: ScriptServer) -> None:
    server.script.append(Scripted(200, completion("Sure! Here are the facts: Ada likes Rust.")))

    with pytest.raises(MemoryModelError, match="content that is not JSON"):
        make_model(server, SleepRecorder()).consolidate(batch())

    assert len(server.requests) == 1


def test_content_null_is_not_retried(server: ScriptServer) -> None:
    server.script.append(Scripted(200, completion(None)))

    with pytest.raises(MemoryModelError, match="no message content"):
        make_model(server, SleepRecorder()).consolidate(batch())

    assert len(server.requests) == 1


def test_content_failing_the_contract_is_not_retried(server: ScriptServer) -> None:
    bad = json.loads(json.dumps(GOOD_ANSWER))
    del bad["episode"]  # no usable shape: a model failure
    server.script.append(Scripted(200, completion(json.dumps(bad))))

    with pytest.raises(MemoryModelError, match="contract"):
        make_model(server, SleepRecorder()).consolidate(batch())

    assert len(server.requests) == 1


def test_a_fact_failing_the_contract_is_dropped_alone(server: ScriptServer) -> None:
    bad = json.loads(json.dumps(GOOD_ANSWER))
    bad["facts"].append({**bad["facts"][0], "kind": "gossip"})
    server.script.append(Scripted(200, completion(json.dumps(bad))))

    answer = make_model(server, SleepRecorder()).consolidate(batch())

    assert [f.kind.value for f in answer.facts] == ["preference"]
    assert [r.reason.split(":")[0] for r in answer.rejected] == ["malformed fact"]
    assert len(server.requests) == 1


def test_truncated_answer_is_refused(server: ScriptServer) -> None:
    # Even a parseable answer is refused when the model ran out of tokens.
    server.script.append(Scripted(200, completion(json.dumps(GOOD_ANSWER), "length")))

    with pytest.raises(MemoryModelError, match="answer truncated"):
        make_model(server, SleepRecorder()).consolidate(batch())

    assert len(server.requests) == 1


def test_401_is_not_retried_and_does_not_leak_the_key(server: ScriptServer) -> None:
    server.script.append(
        Scripted(401, {"error": {"message": f"Incorrect API key provided: {API_KEY}"}})
    )
    sleep = SleepRecorder()

    with pytest.raises(MemoryModelError) as info:
        make_model(server, sleep).consolidate(batch())

    assert len(server.requests) == 1
    assert sleep.calls == []
    message = str(info.value)
    assert "401" in message
    assert API_KEY not in message
    assert "Incorrect API key" in message


def test_long_error_bodies_are_clipped(server: ScriptServer) -> None:
    server.script.append(Scripted(400, "x" * 5000))

    with pytest.raises(MemoryModelError) as info:
        make_model(server, SleepRecorder()).consolidate(batch())

    assert "400" in str(info.value)
    assert len(str(info.value)) < 500


def test_connection_refused_is_retried_then_fails() -> None:
    # Bind and close a socket to get a port nobody listens on.
    srv = ScriptServer()
    base_url = srv.base_url
    srv.server_close()
    sleep = SleepRecorder()
    model = OpenAICompatibleModel(
        "gpt-test", base_url=base_url, api_key=API_KEY, max_attempts=2, sleep=sleep
    )

    with pytest.raises(MemoryModelError, match="transport error"):
        model.consolidate(batch())

    assert len(sleep.calls) == 1


def test_client_is_created_lazily(server: ScriptServer) -> None:
    model = make_model(server, SleepRecorder())
    assert model._endpoint.client is None

    server.script.append(Scripted(200, completion(json.dumps(GOOD_ANSWER))))
    model.consolidate(batch())

    assert model._endpoint.client is not None
    model.close()
    assert model._endpoint.client is None


def test_limits_left_unset_are_the_memory_models_own(server: ScriptServer) -> None:
    # A background batch may wait: three attempts, waits capped at 60 s, 2000 output tokens
    # and a 30 s timeout when the caller says nothing (its DEFAULTS, ChatCompletionsClient).
    server.script.extend(Scripted(503, "busy", {"Retry-After": "3600"}) for _ in range(3))
    server.script.append(Scripted(200, completion(json.dumps(GOOD_ANSWER))))
    sleep = SleepRecorder()
    model = OpenAICompatibleModel("gpt-test", base_url=server.base_url, api_key=None, sleep=sleep)

    with pytest.raises(MemoryModelError, match="after 3 attempts"):
        model.consolidate(batch())
    model.consolidate(batch())

    assert sleep.calls == [60.0, 60.0]
    assert server.requests[-1].body["max_tokens"] == 2000
    assert model._endpoint.client is not None and model._endpoint.client.timeout.read == 30.0


@pytest.mark.parametrize("status", [500, 503, 429, 401, 404])
def test_no_answer_from_the_endpoint_is_the_provider_unavailable(
    server: ScriptServer, status: int
) -> None:
    server.script.append(Scripted(status, {"error": {"message": "down"}}))

    with pytest.raises(ModelUnavailable, match=str(status)):
        make_model(server, SleepRecorder(), max_attempts=1).consolidate(batch())


@pytest.mark.parametrize(
    "reply",
    [
        Scripted(400, {"error": {"message": "context length exceeded"}}),
        Scripted(413, {"error": {"message": "too large"}}),
        Scripted(200, completion("not json")),
    ],
)
def test_a_refused_request_or_an_unusable_answer_is_the_batch_s_own_failure(
    server: ScriptServer, reply: Scripted
) -> None:
    server.script.append(reply)

    with pytest.raises(MemoryModelError) as failed:
        make_model(server, SleepRecorder(), max_attempts=1).consolidate(batch())

    assert not isinstance(failed.value, ModelUnavailable)

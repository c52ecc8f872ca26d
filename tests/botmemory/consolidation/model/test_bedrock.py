"""BedrockModel against a real bedrock-runtime client, stubbed with botocore's Stubber."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from botmemory.consolidation.model.bedrock import TOOL_NAME, BedrockModel
from botmemory.consolidation.model.contract import (
    ANSWER_SCHEMA,
    INSTRUCTIONS,
    MemoryModelError,
    ModelInput,
    ModelUnavailable,
    NumberedObservation,
    render_batch,
)

MODEL_ID = "anthropic.claude-3-5-haiku-20241022-v1:0"

GOOD_INPUT: dict[str, Any] = {
    "facts": [
        {
            "user_id": "111",
            "text": "Ada maintains the billing service.",
            "kind": "project",
            "evidence": [1],
            "supersedes": [],
        }
    ],
    "episode": {"summary": "Ada described her work.", "participants": ["111"]},
}


def batch() -> ModelInput:
    return ModelInput(
        channel_id="c-7",
        observations=[
            NumberedObservation(
                number=1,
                author_id="111",
                author_name="Ada",
                kind="msg",
                text="I maintain the billing service",
            )
        ],
    )


def converse_response(
    content: list[dict[str, Any]], stop_reason: str = "tool_use"
) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason,
        "usage": {"inputTokens": 120, "outputTokens": 40, "totalTokens": 160},
        "metrics": {"latencyMs": 350},
    }


def tool_use(tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": "t1", "name": TOOL_NAME, "input": tool_input}}


@pytest.fixture
def client() -> Any:
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )


@pytest.fixture
def stubber(client: Any) -> Iterator[Stubber]:
    with Stubber(client) as stub:
        yield stub
        # Every scripted response must have been consumed by the test.
        stub.assert_no_pending_responses()


def make_model(client: Any) -> BedrockModel:
    return BedrockModel(MODEL_ID, client=client, max_output_tokens=1500)


def test_success_forces_the_tool_and_parses_its_input(client: Any, stubber: Stubber) -> None:
    expected = {
        "modelId": MODEL_ID,
        "system": [{"text": INSTRUCTIONS}],
        "messages": [{"role": "user", "content": [{"text": render_batch(batch())}]}],
        "toolConfig": {
            "tools": [
                {
                    "toolSpec": {
                        "name": "record_memory",
                        "description": ANY,
                        "inputSchema": {"json": ANSWER_SCHEMA},
                    }
                }
            ],
            "toolChoice": {"tool": {"name": "record_memory"}},
        },
        "inferenceConfig": {"maxTokens": 1500, "temperature": 0},
    }
    stubber.add_response("converse", converse_response([tool_use(GOOD_INPUT)]), expected)
    model = make_model(client)

    answer = model.consolidate(batch())

    assert model.name == f"bedrock:{MODEL_ID}"
    assert len(answer.facts) == 1
    assert answer.facts[0].kind == "project"
    assert answer.facts[0].evidence == [1]
    assert answer.episode.summary == "Ada described her work."
    assert answer.episode.participants == ["111"]


def test_tool_use_after_a_text_block_is_found(client: Any, stubber: Stubber) -> None:
    content = [{"text": "Recording the memory now."}, tool_use(GOOD_INPUT)]
    stubber.add_response("converse", converse_response(content))

    answer = make_model(client).consolidate(batch())

    assert answer.facts[0].text == "Ada maintains the billing service."


def test_text_only_answer_is_an_error(client: Any, stubber: Stubber) -> None:
    stubber.add_response(
        "converse", converse_response([{"text": "Ada maintains billing."}], "end_turn")
    )

    with pytest.raises(MemoryModelError, match="did not call record_memory"):
        make_model(client).consolidate(batch())


def test_max_tokens_is_an_error(client: Any, stubber: Stubber) -> None:
    # The partial input here would even validate; a truncated answer is refused regardless.
    stubber.add_response("converse", converse_response([tool_use(GOOD_INPUT)], "max_tokens"))

    with pytest.raises(MemoryModelError, match="truncated"):
        make_model(client).consolidate(batch())


def test_input_missing_the_episode_is_an_error(client: Any, stubber: Stubber) -> None:
    bad = copy.deepcopy(GOOD_INPUT)
    del bad["episode"]
    stubber.add_response("converse", converse_response([tool_use(bad)]))

    with pytest.raises(MemoryModelError, match="contract"):
        make_model(client).consolidate(batch())


def test_throttling_is_an_error(client: Any, stubber: Stubber) -> None:
    stubber.add_client_error(
        "converse",
        service_error_code="ThrottlingException",
        service_message="Too many requests",
        http_status_code=429,
    )

    with pytest.raises(MemoryModelError, match="ThrottlingException") as info:
        make_model(client).consolidate(batch())

    assert "Too many requests" in str(info.value)


def test_client_is_created_lazily_in_the_given_region(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[tuple[str, dict[str, Any]]] = []

    def fake_client(service: str, **kwargs: Any) -> str:
        created.append((service, kwargs))
        return "client"

    monkeypatch.setattr(boto3, "client", fake_client)
    model = BedrockModel(MODEL_ID, region_name="eu-west-3")
    assert created == []

    assert model._bedrock() == "client"
    assert model._bedrock() == "client"
    # Once, in that region, with the Config botmemory.providers.aws_clients builds (tests/botmemory/providers/test_aws_clients.py).
    assert [(service, kwargs["region_name"]) for service, kwargs in created] == [
        ("bedrock-runtime", "eu-west-3")
    ]
    assert created[0][1]["config"].retries["mode"] == "standard"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ThrottlingException", 429),
        ("ServiceUnavailableException", 503),
        ("AccessDeniedException", 403),
    ],
)
def test_no_answer_from_bedrock_is_the_provider_unavailable(
    client: Any, stubber: Stubber, code: str, status: int
) -> None:
    stubber.add_client_error("converse", service_error_code=code, http_status_code=status)

    with pytest.raises(ModelUnavailable, match=code):
        make_model(client).consolidate(batch())


def test_a_refused_request_or_an_unusable_answer_is_the_batch_s_own_failure(
    client: Any, stubber: Stubber
) -> None:
    stubber.add_client_error(
        "converse", service_error_code="ValidationException", http_status_code=400
    )
    stubber.add_response("converse", converse_response([{"text": "no tool"}]))

    for _ in range(2):
        with pytest.raises(MemoryModelError) as failed:
            make_model(client).consolidate(batch())
        assert not isinstance(failed.value, ModelUnavailable)

"""InteractionsFunction: signatures first, then a clear answer for every kind of request."""

from __future__ import annotations

import base64
import json
from enum import Enum
from typing import Any

import pytest
from nacl.signing import SigningKey

from botmemory.discord.interactions import (
    ApplicationCommandType,
    ApplicationIntegrationType,
    ButtonStyle,
    ComponentType,
    InteractionContextType,
    InteractionResponseType,
    InteractionType,
    MessageFlag,
    OptionType,
    Permissions,
    ephemeral_message,
)
from scripts.make_events import TEST_SEED, TIMESTAMP, command, function_url_event, signed
from tests.support.lambda_local import EVENTS, LocalLambda, sample_env

PING = {
    "id": "1500000000000000009",
    "application_id": "1",
    "type": InteractionType.PING,
    "token": "t",
    "version": 1,
}


def test_protocol_numbers_are_discords_documented_values() -> None:
    """The enumerations, checked once against Discord's documentation written out as numbers,
    so the other tests may use the names."""
    documented: list[tuple[type[Enum], dict[str, int]]] = [
        (
            InteractionType,
            {
                "PING": 1,
                "APPLICATION_COMMAND": 2,
                "MESSAGE_COMPONENT": 3,
                "APPLICATION_COMMAND_AUTOCOMPLETE": 4,
                "MODAL_SUBMIT": 5,
            },
        ),
        (
            InteractionResponseType,
            {
                "PONG": 1,
                "CHANNEL_MESSAGE_WITH_SOURCE": 4,
                "DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE": 5,
                "DEFERRED_UPDATE_MESSAGE": 6,
                "UPDATE_MESSAGE": 7,
                "APPLICATION_COMMAND_AUTOCOMPLETE_RESULT": 8,
            },
        ),
        (MessageFlag, {"EPHEMERAL": 64}),
        (Permissions, {"ADMINISTRATOR": 8, "MANAGE_GUILD": 32, "VIEW_CHANNEL": 1024}),
        (ApplicationCommandType, {"CHAT_INPUT": 1}),
        (
            OptionType,
            {
                "SUB_COMMAND": 1,
                "SUB_COMMAND_GROUP": 2,
                "STRING": 3,
                "INTEGER": 4,
                "USER": 6,
                "CHANNEL": 7,
            },
        ),
        (InteractionContextType, {"GUILD": 0, "BOT_DM": 1}),
        (ApplicationIntegrationType, {"GUILD_INSTALL": 0}),
        (ComponentType, {"ACTION_ROW": 1, "BUTTON": 2}),
        (ButtonStyle, {"SECONDARY": 2, "DANGER": 4}),
    ]
    for enumeration, values in documented:
        assert {m.name: m.value for m in enumeration} == values, enumeration
    # On the wire they are plain numbers.
    assert json.loads(json.dumps(ephemeral_message("hi"))) == {
        "type": 4,
        "data": {"content": "hi", "flags": 64, "allowed_mentions": {"parse": []}},
    }
    assert json.dumps([InteractionResponseType.PONG, MessageFlag.EPHEMERAL]) == "[1, 64]"


def invoke(monkeypatch: pytest.MonkeyPatch, event: dict[str, Any]) -> dict[str, Any]:
    return LocalLambda(monkeypatch, sample_env()).invoke("InteractionsFunction", event)


def test_a_signed_ping_gets_a_pong(dynamodb: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    response = invoke(monkeypatch, signed(PING, "r1"))

    assert response["statusCode"] == 200
    assert json.loads(response["body"]) == {"type": InteractionResponseType.PONG}


def test_a_base64_encoded_body_is_verified_on_its_raw_bytes(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = signed(PING, "r1")
    event["body"] = base64.b64encode(event["body"].encode()).decode()
    event["isBase64Encoded"] = True

    assert invoke(monkeypatch, event)["statusCode"] == 200


def tampered(change: str) -> dict[str, Any]:
    event = signed(PING, "r1")
    headers = event["headers"]
    if change == "no signature":
        del headers["x-signature-ed25519"]
    elif change == "no timestamp":
        del headers["x-signature-timestamp"]
    elif change == "non-hex signature":
        headers["x-signature-ed25519"] = "zz" * 64
    elif change == "short signature":
        headers["x-signature-ed25519"] = headers["x-signature-ed25519"][:-2]
    elif change == "other timestamp":
        headers["x-signature-timestamp"] = str(int(headers["x-signature-timestamp"]) + 1)
    elif change == "other body":
        event["body"] = event["body"].replace('"type":1', '"type":2')
    elif change == "signed by another key":
        message = (headers["x-signature-timestamp"] + event["body"]).encode()
        headers["x-signature-ed25519"] = SigningKey(bytes(32)).sign(message).signature.hex()
    return event


@pytest.mark.parametrize(
    "change",
    [
        "no signature",
        "no timestamp",
        "non-hex signature",
        "short signature",
        "other timestamp",
        "other body",
        "signed by another key",
    ],
)
def test_any_signature_failure_gets_401_and_does_nothing(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    response = invoke(monkeypatch, tampered(change))

    assert response["statusCode"] == 401
    assert dynamodb.scan(TableName="MemoryTable")["Items"] == []


@pytest.mark.parametrize("body", ["{not json", "[1, 2]", '{"id": "1"}', '"ping"'])
def test_a_signed_but_malformed_body_gets_400(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, body: str
) -> None:
    signature = SigningKey(TEST_SEED).sign((TIMESTAMP + body).encode()).signature.hex()
    event = function_url_event(
        body, {"x-signature-ed25519": signature, "x-signature-timestamp": TIMESTAMP}, "r2"
    )

    response = invoke(monkeypatch, event)

    assert response["statusCode"] == 400
    assert "malformed" in json.loads(response["body"])["error"]


def test_an_unknown_command_gets_a_clear_ephemeral_answer(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    response = invoke(monkeypatch, signed(command("1500000000000000010", "weather", "today"), "r3"))

    data = json.loads(response["body"])["data"]
    assert "don't know the command `/weather today`" in data["content"]
    assert data["flags"] == MessageFlag.EPHEMERAL and data["allowed_mentions"] == {"parse": []}


def test_memory_show_lists_the_callers_facts_with_ids(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalLambda(monkeypatch, sample_env())
    batch = json.loads((EVENTS / "ingest/gateway-batch.json").read_text())
    local.invoke("IngestFunction", batch)
    from botmemory.runtime import services_from_environment

    consolidator = services_from_environment().consolidator
    consolidator.consolidate("1200000000000000001", force=True)
    # Alice said five things: three are kept at once (the allergy first), the other two
    # wait as candidates for the channel's next round (botmemory.consolidation.candidates).
    consolidator.consolidate("1200000000000000001", force=True)

    response = local.invoke(
        "InteractionsFunction", signed(command("1500000000000000011", "memory", "show"), "r4")
    )

    content = json.loads(response["body"])["data"]["content"]
    assert content.startswith("What I remember about you here:")
    assert "Alice is a nurse" in content and "Alice loves hiking in the Alps" in content
    assert "Alice is allergic to peanuts" in content
    assert "sushi" not in content  # Bob said it, not Alice

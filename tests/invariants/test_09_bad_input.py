"""A hostile member cannot break memory: each test here is the attack.

InteractionsFunction: a captured request replayed later, bodies Discord never sends but a
key holder could sign (nested past the parser's limit, not UTF-8, not an object, a `type`
that is not an integer). Ingest: a message whose payload lies about its time, ids made in
the future, edits dated anywhere.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable
from typing import Any

import pytest
from nacl.signing import SigningKey

from botmemory.clock import ManualClock, SystemClock
from botmemory.discord.interactions import (
    DEFAULT_TIMESTAMP_TOLERANCE_SECONDS,
    MAX_NESTING,
    InteractionResponseType,
    parse_interaction,
)
from botmemory.records import ObservationKind
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.snowflake import snowflake_ms
from botmemory.storage.keys import observation_sk
from localrun import gateway as gw
from localrun.samtemplate import FunctionSpec, load_handler
from localrun.stack import parse_emf
from scripts.make_events import ALICE, TEST_SEED, command, function_url_event
from tests.conftest import TABLE, scan_all
from tests.support import lambda_local
from tests.support.lambda_local import LocalLambda, sample_env

TOLERANCE_ENV = "DISCORD_TIMESTAMP_TOLERANCE_SECONDS"
PING = {"id": "1500000000000000101", "application_id": "1", "type": 1, "token": "t", "version": 1}

# --- InteractionsFunction ----------------------------------------------------------------


@pytest.fixture
def discord_clock(monkeypatch: pytest.MonkeyPatch, clock: ManualClock) -> ManualClock:
    """The clock InteractionsFunction judges signed timestamps by, put into each fresh load
    of its module (LocalLambda loads the handler anew for every invoke, as a cold start)."""

    def load(spec: FunctionSpec) -> Callable[[Any, Any], Any]:
        handler = load_handler(spec)
        if spec.logical_id == "InteractionsFunction":
            monkeypatch.setattr(sys.modules[handler.__module__], "clock", clock)
        return handler

    monkeypatch.setattr(lambda_local, "load_handler", load)
    return clock


def deployed(monkeypatch: pytest.MonkeyPatch) -> LocalLambda:
    """The functions with the template's own tolerance, not the one events/env.json widens
    for the fixed-time samples."""
    env = sample_env()
    env["InteractionsFunction"].pop(TOLERANCE_ENV, None)
    return LocalLambda(monkeypatch, env)


def signed_at(body: str | bytes, timestamp: str, request_id: str = "hostile") -> dict[str, Any]:
    """A Function URL event carrying `body`, signed as Discord signs (with the test key):
    Ed25519 over the timestamp followed by the raw body. Bytes travel base64-encoded."""
    raw = body if isinstance(body, bytes) else body.encode()
    signature = SigningKey(TEST_SEED).sign(timestamp.encode() + raw).signature.hex()
    headers = {"x-signature-ed25519": signature, "x-signature-timestamp": timestamp}
    event = function_url_event("", headers, request_id)
    event["body"] = base64.b64encode(raw).decode()
    event["isBase64Encoded"] = True
    return event


def seconds(clock: ManualClock, offset: int = 0) -> str:
    return str(clock.now_ms() // 1000 + offset)


def optin() -> str:
    return json.dumps(command("1500000000000000201", "memory", "optin"), separators=(",", ":"))


def member_services(dynamodb: Any) -> MemoryServices:
    """Fresh services, so the opt-out list is read anew."""
    return build_services(
        Settings(table_name=TABLE, memory_model="rules"), dynamodb=dynamodb, clock=SystemClock()
    )


def test_the_template_sets_the_documented_default_tolerance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = LocalLambda(monkeypatch, {}).template.function("InteractionsFunction")

    assert spec.environment[TOLERANCE_ENV] == str(DEFAULT_TIMESTAMP_TOLERANCE_SECONDS) == "300"


def test_a_captured_optin_replayed_a_day_later_gets_401_and_changes_nothing(
    dynamodb: Any,
    monkeypatch: pytest.MonkeyPatch,
    discord_clock: ManualClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Alice opted in once (request captured), then opted out; a day on, the capture comes back.
    captured = signed_at(optin(), seconds(discord_clock))
    member_services(dynamodb).opt_outs.opt_out(ALICE)
    before = scan_all(dynamodb)
    discord_clock.advance(days=1)
    capsys.readouterr()

    response = deployed(monkeypatch).invoke("InteractionsFunction", captured)

    assert response["statusCode"] == 401
    assert scan_all(dynamodb) == before
    assert member_services(dynamodb).opt_outs.is_opted_out(ALICE)
    counted = parse_emf(capsys.readouterr().out)
    assert counted["InteractionsUnauthorized"] == counted["InteractionsStale"] == 1


@pytest.mark.parametrize(
    ("offset", "status"),
    [
        (-86_400, 401),  # a day old
        (-301, 401),
        (-300, 200),  # five minutes, either way, is still Discord's clock against ours
        (-60, 200),
        (300, 200),
        (301, 401),
        (360, 401),  # six minutes ahead
    ],
)
def test_only_a_request_signed_within_five_minutes_of_now_is_accepted(
    dynamodb: Any,
    monkeypatch: pytest.MonkeyPatch,
    discord_clock: ManualClock,
    offset: int,
    status: int,
) -> None:
    response = deployed(monkeypatch).invoke(
        "InteractionsFunction", signed_at(json.dumps(PING), seconds(discord_clock, offset))
    )

    assert response["statusCode"] == status
    if status == 200:
        assert json.loads(response["body"]) == {"type": InteractionResponseType.PONG}


def test_an_optin_signed_a_minute_ago_is_accepted(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, discord_clock: ManualClock
) -> None:
    member_services(dynamodb).opt_outs.opt_out(ALICE)

    response = deployed(monkeypatch).invoke(
        "InteractionsFunction", signed_at(optin(), seconds(discord_clock, -60))
    )

    assert response["statusCode"] == 200
    assert "opted in" in json.loads(response["body"])["data"]["content"]
    assert not member_services(dynamodb).opt_outs.is_opted_out(ALICE)


@pytest.mark.parametrize(
    "timestamp",
    [
        "yesterday",
        "{now}.0",
        "+{now}",
        " {now}",
        "{now}_0",
        "".join(
            chr(0x0660 + int(d)) for d in "1767225600"
        ),  # Arabic-Indic digits: int() reads them
        "9" * 5000,
        "-1",
    ],
)
def test_a_signed_timestamp_that_is_not_plain_unix_seconds_gets_401(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, discord_clock: ManualClock, timestamp: str
) -> None:
    stamp = timestamp.format(now=seconds(discord_clock))

    response = deployed(monkeypatch).invoke(
        "InteractionsFunction", signed_at(json.dumps(PING), stamp)
    )

    assert response["statusCode"] == 401
    assert scan_all(dynamodb) == []


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"[" * 100_000, id="nested past the parser's limit"),
        pytest.param(b'{"type":2,"data":' + b"[" * 100_000, id="nested inside a command"),
        pytest.param(
            optin().encode()[:-1] + b',"x":' + b"[" * 400 + b"]" * 400 + b"}",
            id="a command that parses but nests too deep for what follows",
        ),
        pytest.param(b'{"type":1,"id":"\xff\xfe"}', id="not UTF-8"),
        pytest.param(b'\xef\xbb\xbf{"type":1}', id="a byte order mark"),
        pytest.param('{"type":1}'.encode("utf-16"), id="UTF-16"),
        pytest.param(b'[{"type":1}]', id="a top-level array"),
        pytest.param(b'{"type":"2"}', id="type a string"),
        pytest.param(b'{"type":1.0}', id="type a float"),
        pytest.param(b'{"type":true}', id="type a boolean"),
        pytest.param(b'{"type":1e999}', id="type infinite"),
        pytest.param(b'{"type":' + b"9" * 5000 + b"}", id="type too long to read"),
        pytest.param(b'{"type":null}', id="type null"),
        pytest.param(b"", id="empty"),
    ],
)
def test_a_signed_body_that_is_not_an_interaction_gets_400_and_changes_nothing(
    dynamodb: Any,
    monkeypatch: pytest.MonkeyPatch,
    discord_clock: ManualClock,
    capsys: pytest.CaptureFixture[str],
    body: bytes,
) -> None:
    capsys.readouterr()

    response = deployed(monkeypatch).invoke(
        "InteractionsFunction", signed_at(body, seconds(discord_clock))
    )

    assert response["statusCode"] == 400
    assert json.loads(response["body"]) == {"error": "malformed interaction"}
    assert scan_all(dynamodb) == []
    assert parse_emf(capsys.readouterr().out)["InteractionsMalformed"] == 1


def test_an_interaction_may_nest_as_deep_as_the_limit_and_no_deeper() -> None:
    def nested(levels: int) -> bytes:  # the object itself is the first level
        inner = levels - 1
        return b'{"type":2,"data":' + b"[" * inner + b"]" * inner + b"}"

    assert parse_interaction(nested(MAX_NESTING)) is not None
    assert parse_interaction(nested(MAX_NESTING + 1)) is None
    assert parse_interaction(b'{"type":2,"data":{"options":[{"options":[{"value":1}]}]}}') == (
        {"type": 2, "data": {"options": [{"options": [{"value": 1}]}]}},
        2,
    )


# --- Ingest --------------------------------------------------------------------------------

T0 = 1_767_225_600_000  # the clock fixture's now


def stored(dynamodb: Any) -> dict[str, dict[str, Any]]:
    return {i["sk"]["S"]: i for i in scan_all(dynamodb) if i["sk"]["S"].startswith("OBS#")}


def test_a_message_that_claims_the_year_9999_is_stored_at_its_ids_time(
    services: MemoryServices, dynamodb: Any
) -> None:
    liar = gw.message(gw.ALICE, "from the far future", T0 - 60_000)
    liar["d"]["timestamp"] = "9999-12-31T23:59:59+00:00"
    message_id = liar["d"]["id"]

    result = services.recorder.record([liar, gw.delete(liar)])

    assert result.stored == 2 and result.rejected == []
    at_ms = snowflake_ms(message_id)
    assert at_ms == T0 - 60_000
    # Computable from the id alone, and the same millisecond as its delete.
    expected = {
        observation_sk(at_ms, ObservationKind.MESSAGE, message_id),
        observation_sk(at_ms, ObservationKind.DELETE, message_id),
    }
    assert set(stored(dynamodb)) == expected
    assert {int(i["at_ms"]["N"]) for i in stored(dynamodb).values()} == {at_ms}


def test_a_message_that_claims_the_distant_past_is_stored_at_its_ids_time(
    services: MemoryServices, dynamodb: Any
) -> None:
    liar = gw.message(gw.ALICE, "from 1999", T0 - 1000)
    liar["d"]["timestamp"] = "1999-01-01T00:00:00+00:00"

    services.recorder.record([liar])

    (sk,) = stored(dynamodb)
    assert sk == observation_sk(T0 - 1000, ObservationKind.MESSAGE, liar["d"]["id"])


FAR = T0 + 365 * 86_400_000  # a year ahead of the clock


def future_events() -> list[tuple[str, dict[str, Any]]]:
    ahead = gw.message(gw.ALICE, "sent from next year", FAR)
    now = gw.message(gw.BOB, "sent now", T0)
    return [
        ("message", ahead),
        ("answer", gw.message(gw.BOT, "an answer from next year", FAR)),
        ("edit", gw.edit(ahead, "edited", FAR)),
        ("delete", gw.delete(ahead)),
        ("bulk delete", gw.delete_bulk([now, ahead])),
        ("reaction", gw.reaction("MESSAGE_REACTION_ADD", ahead, gw.BOB)),
        ("unreaction", gw.reaction("MESSAGE_REACTION_REMOVE", ahead, gw.BOB)),
        ("reactions cleared", gw.reaction("MESSAGE_REACTION_REMOVE_ALL", ahead, gw.BOB)),
        ("emoji cleared", gw.reaction("MESSAGE_REACTION_REMOVE_EMOJI", ahead, gw.BOB)),
        (
            "largest id",
            dict(ahead, d=dict(ahead["d"], id="99999999999999999999")),
        ),
    ]


@pytest.mark.parametrize(
    "event", [e for _, e in future_events()], ids=[name for name, _ in future_events()]
)
def test_an_id_made_in_the_far_future_is_rejected_and_the_rest_is_stored(
    services: MemoryServices, dynamodb: Any, event: dict[str, Any]
) -> None:
    before, after = gw.message(gw.ALICE, "before", T0), gw.message(gw.BOB, "after", T0 + 1)

    result = services.recorder.record([before, event, after])

    assert result.stored == 2
    assert [(r.index, r.event) for r in result.rejected] == [(1, event["t"])]
    assert "not a Discord id" in result.rejected[0].reason
    assert {i["content"]["S"] for i in stored(dynamodb).values()} == {"before", "after"}


def test_an_id_a_little_ahead_of_the_clock_is_accepted(
    services: MemoryServices, dynamodb: Any
) -> None:
    """Discord's clock and ours differ a little: four minutes ahead is still a message."""
    result = services.recorder.record([gw.message(gw.ALICE, "hi", T0 + 4 * 60_000)])

    assert result.stored == 1 and result.rejected == []


@pytest.mark.parametrize(
    ("edited", "expected_ms"),
    [
        ("9999-12-31T23:59:59+00:00", T0 + 5 * 60_000),  # no later than now + 5 minutes
        ("2001-01-01T00:00:00+00:00", T0 - 60_000),  # no earlier than the message itself
        ("2026-01-01T00:00:30+00:00", T0 + 30_000),  # a plausible time is kept
        ("2026-01-01T00:00:30", T0 + 30_000),  # without a zone: UTC, not the host's zone
    ],
)
def test_an_edits_time_is_held_between_its_message_and_now(
    services: MemoryServices, dynamodb: Any, edited: str, expected_ms: int
) -> None:
    original = gw.message(gw.ALICE, "first words", T0 - 60_000)
    edit = gw.edit(original, "second words", T0)
    edit["d"]["edited_timestamp"] = edited

    result = services.recorder.record([edit])

    assert result.stored == 1
    (item,) = stored(dynamodb).values()
    assert item["sk"]["S"] == observation_sk(expected_ms, ObservationKind.EDIT, original["d"]["id"])
    assert int(item["at_ms"]["N"]) == expected_ms

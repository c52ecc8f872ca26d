"""Ingest: raw gateway events become observations, one conditional write each."""

from __future__ import annotations

from typing import Any

import pytest

from botmemory.records import ObservationKind
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from localrun import gateway as gw
from tests.conftest import (
    READ_OPERATIONS,
    WRITE_OPERATIONS,
    CountingModel,
    RequestCounter,
    scan_all,
)

T0 = 1_767_225_600_000


def observations(client: Any) -> list[dict[str, Any]]:
    return [i for i in scan_all(client) if i["sk"]["S"].startswith("OBS#")]


def every_event_type() -> list[dict[str, Any]]:
    return gw.every_event_type(T0)


def test_every_event_type_becomes_one_observation(services: MemoryServices, dynamodb: Any) -> None:
    result = services.recorder.record(every_event_type())

    assert result.rejected == [] and result.ignored == []
    assert result.stored == 11
    kinds = sorted(i["kind"]["S"] for i in observations(dynamodb))
    assert kinds == sorted(
        [
            "msg",
            "msg",
            "msg",
            "answer",
            "edit",
            "del",
            "delbulk",
            "react",
            "unreact",
            "unreactall",
            "unreactemoji",
        ]
    )
    stored = {i["kind"]["S"]: i for i in observations(dynamodb)}
    assert stored["answer"]["author_id"]["S"] == gw.BOT
    assert stored["edit"]["content"]["S"] == "I love hiking in the Dolomites"
    assert stored["react"]["emoji"]["S"] == "👍"
    assert stored["react"]["author_id"]["S"] == gw.BOB
    assert all("pending_sk" in i and "expires_at" in i for i in observations(dynamodb))


def test_each_event_costs_one_write_no_read_and_no_model_call(
    services: MemoryServices, dynamodb: Any, model: CountingModel, clock: Any
) -> None:
    services.recorder.record(gw.every_event_type(T0 - 60_000))  # warms the opt-out list
    counter = RequestCounter(dynamodb)
    events = every_event_type()

    services.recorder.record(events)

    assert counter.count(*WRITE_OPERATIONS) == len(events)
    assert counter.count("PutItem") == len(events)
    assert counter.count(*READ_OPERATIONS) == 0
    assert model.calls == []


def test_the_opt_out_list_costs_one_read_a_minute_not_one_per_event(
    services: MemoryServices, dynamodb: Any, clock: Any
) -> None:
    counter = RequestCounter(dynamodb)

    for minute in range(3):
        for second in range(0, 60, 10):
            clock.set(T0 + minute * 60_000 + second * 1000)
            services.recorder.record(gw.every_event_type(T0 + minute * 60_000 + second * 1000))

    # Each minute: the opt-out list, the pauses and the server's controls
    # (botmemory.people.controls), one read each.
    assert counter.count(*READ_OPERATIONS) == 3 * 3
    assert counter.count("PutItem") == 3 * 6 * 11


def test_a_replayed_event_is_stored_once(services: MemoryServices, dynamodb: Any) -> None:
    events = every_event_type()
    services.recorder.record(events)

    again = services.recorder.record(events)

    assert again.stored == 0 and again.duplicates == len(events)
    assert len(observations(dynamodb)) == len(events)


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({"t": "MESSAGE_CREATE", "d": {"channel_id": gw.CHANNEL, "content": "x"}}, "id"),
        ({"t": "MESSAGE_CREATE", "d": dict(gw.message(gw.ALICE, "hi", T0)["d"], id=12345)}, "id"),
        (
            {"t": "MESSAGE_CREATE", "d": dict(gw.message(gw.ALICE, "hi", T0)["d"], author="alice")},
            "author",
        ),
        (
            {
                "t": "MESSAGE_CREATE",
                "d": dict(gw.message(gw.ALICE, "hi", T0)["d"], channel_id="general"),
            },
            "channel_id",
        ),
        (
            {
                "t": "MESSAGE_CREATE",
                "d": dict(gw.message(gw.ALICE, "hi", T0)["d"], timestamp="yesterday"),
            },
            "timestamp",
        ),
        (
            {
                "t": "MESSAGE_CREATE",
                "d": dict(gw.message(gw.ALICE, "x", T0)["d"], content="x" * 3_000_000),
            },
            "content",
        ),
        (
            {
                "t": "MESSAGE_CREATE",
                "d": dict(gw.message(gw.ALICE, "x", T0)["d"], content="bad \ud800 text"),
            },
            "UTF-8",
        ),
        ({"t": "TYPING_START", "d": {"channel_id": gw.CHANNEL}}, "unsupported event type"),
        ({"t": "MESSAGE_CREATE"}, "payload"),
        ({"d": {"id": "1"}}, "name"),
        ("MESSAGE_CREATE", "not an object"),
        ({"t": "MESSAGE_DELETE_BULK", "d": {"ids": [], "channel_id": gw.CHANNEL}}, "ids"),
        (
            {
                "t": "MESSAGE_REACTION_ADD",
                "d": {"channel_id": gw.CHANNEL, "message_id": "1", "emoji": {}},
            },
            "user_id",
        ),
    ],
)
def test_a_malformed_event_is_rejected_with_a_reason_and_the_rest_is_stored(
    services: MemoryServices, dynamodb: Any, event: Any, reason: str
) -> None:
    good_before = gw.message(gw.ALICE, "before", T0)
    good_after = gw.message(gw.BOB, "after", T0 + 1)

    result = services.recorder.record([good_before, event, good_after])

    assert result.stored == 2
    assert len(result.rejected) == 1
    assert result.rejected[0].index == 1
    assert reason in result.rejected[0].reason
    assert {i["content"]["S"] for i in observations(dynamodb)} == {"before", "after"}


def test_an_update_without_new_content_is_ignored_not_rejected(
    services: MemoryServices, dynamodb: Any
) -> None:
    original = gw.message(gw.ALICE, "see https://example.invalid", T0)
    embed_only = {
        "t": "MESSAGE_UPDATE",
        "d": {"id": original["d"]["id"], "channel_id": gw.CHANNEL, "embeds": []},
    }

    result = services.recorder.record([embed_only])

    assert result.stored == 0 and result.rejected == []
    assert "without new content" in result.ignored[0].reason
    assert observations(dynamodb) == []


def test_stored_text_is_scrubbed_and_clipped(dynamodb: Any, clock: Any) -> None:
    settings = Settings(table_name="MemoryTable", memory_model="rules", observation_chars=40)
    services = build_services(settings, dynamodb=dynamodb, clock=clock, model=CountingModel())
    hidden = "I like tea\u202e\u200b and\x00 biscuits " + "and more " * 20

    services.recorder.record([gw.message(gw.ALICE, hidden, T0)])

    (item,) = observations(dynamodb)
    content = item["content"]["S"]
    assert len(content) <= 40
    assert content.startswith("I like tea and biscuits")
    assert not any(ch in content for ch in "\u202e\u200b\x00")


def test_direct_messages_are_scoped_to_dm(services: MemoryServices, dynamodb: Any) -> None:
    services.recorder.record([gw.message(gw.ALICE, "hello", T0, guild=None)])

    (item,) = observations(dynamodb)
    assert item["scope"]["S"] == "dm"


def test_memory_off_writes_nothing(dynamodb: Any, clock: Any) -> None:
    settings = Settings(table_name="MemoryTable", memory_model=None)
    services = build_services(settings, dynamodb=dynamodb, clock=clock)
    counter = RequestCounter(dynamodb)

    result = services.recorder.record(every_event_type())

    assert result.stored == 0
    assert len(result.ignored) == 11 and result.ignored[0].reason == "memory is off"
    assert counter.count(*WRITE_OPERATIONS) == 0
    assert scan_all(dynamodb) == []


def test_the_bots_own_answer_is_an_answer_and_other_bots_are_marked(
    services: MemoryServices, dynamodb: Any
) -> None:
    other_bot = gw.message("377777777777777777", "beep", T0 + 5)
    other_bot["d"]["author"]["bot"] = True

    services.recorder.record([gw.message(gw.BOT, "Hi!", T0), other_bot])

    by_author = {i["author_id"]["S"]: i for i in observations(dynamodb)}
    assert by_author[gw.BOT]["kind"]["S"] == ObservationKind.ANSWER.value
    assert by_author["377777777777777777"]["kind"]["S"] == "msg"
    assert by_author["377777777777777777"]["author_is_bot"]["BOOL"] is True


def test_an_images_alt_text_is_kept_with_the_message_it_came_with(
    services: MemoryServices, dynamodb: Any
) -> None:
    shared = gw.message(
        gw.ALICE,
        "look what I made!",
        T0,
        attachments=[
            gw.image("a clay  bowl\nwith a blue glaze"),
            gw.image(None),  # no alt text: nothing to keep
            gw.image("minutes of the meeting", content_type="application/pdf"),
        ],
    )
    only_a_picture = gw.message(gw.BOB, "", T0 + 1, attachments=[gw.image("a sunset at sea")])

    result = services.recorder.record([shared, only_a_picture])

    assert result.stored == 2
    assert sorted(i["content"]["S"] for i in observations(dynamodb)) == [
        "[image: a sunset at sea]",
        "look what I made! [image: a clay bowl with a blue glaze] [file: minutes of the meeting]",
    ]


def test_a_message_with_more_attachments_than_discord_allows_is_rejected(
    services: MemoryServices, dynamodb: Any
) -> None:
    forged = gw.message(gw.ALICE, "spam", T0, attachments=[gw.image("x")] * 11)

    result = services.recorder.record([forged])

    assert result.stored == 0 and len(result.rejected) == 1
    assert "attachments" in result.rejected[0].reason
    assert observations(dynamodb) == []

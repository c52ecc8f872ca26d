"""Which gateway messages the bot answers: a mention, a reply to it, a DM; never its own
message or another bot's, never a role or @everyone mention, never an empty or malformed
question; and the question it carries is cleaned and bounded."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from botmemory.answering.triggers import AnswerTrigger, TriggerKind, answer_trigger, question_text
from botmemory.search.keywords import MAX_QUERY_CHARS
from localrun.gateway import ALICE, BOB, BOT, CHANNEL, GUILD, message, user
from tests.conftest import START_MS

OTHER_BOT = "388888888888888888"
ROLE = "500000000000000009"


def mention(content: str = "what did Alice say about hiking?", **kwargs: Any) -> dict[str, Any]:
    """Alice mentions the bot, as Discord sends it (`<@id>` in the text, the bot in `mentions`)."""
    event = message(ALICE, f"<@{BOT}> {content}", START_MS, **kwargs)
    event["d"]["mentions"] = [user(BOT, bot=True)]
    return event


def reply_to(author: str, content: str, *, ping: bool = False) -> dict[str, Any]:
    """Alice replies to a message of `author`; with `ping`, Discord lists that author in
    `mentions` (the reply pings them) without any mention in the text."""
    original = message(author, "Alice likes the Alps.", START_MS - 60_000)
    event = message(ALICE, content, START_MS, reply_to=original["d"]["id"])
    event["d"]["type"] = 19
    event["d"]["message_reference"]["type"] = 0
    event["d"]["referenced_message"] = original["d"]
    if ping:
        event["d"]["mentions"] = [user(author, bot=author == BOT)]
    return event


# -- what triggers -------------------------------------------------------------------------


def test_a_mention_of_the_bot_triggers_with_the_mention_removed() -> None:
    event = mention()
    trigger = answer_trigger(event, BOT)

    assert trigger == AnswerTrigger(
        kind=TriggerKind.MENTION,
        guild_id=GUILD,
        channel_id=CHANNEL,
        message_id=event["d"]["id"],
        author_id=ALICE,
        author_name="Alice",
        content="what did Alice say about hiking?",
        replied_to_bot=False,
    )


@pytest.mark.parametrize(
    ("text", "question"),
    [
        (f"<@{BOT}>, where is Bob?", "where is Bob?"),
        (f"hey <@!{BOT}> where is Bob?", "hey where is Bob?"),
        (f"where is Bob, <@{BOT}>?", "where is Bob, ?"),
        (f"<@{BOT}> ask <@{BOB}> or me", f"ask <@{BOB}> or me"),
    ],
)
def test_every_form_of_the_bots_mention_leaves_the_text(text: str, question: str) -> None:
    event = message(ALICE, text, START_MS)
    event["d"]["mentions"] = [user(BOT, bot=True)]

    trigger = answer_trigger(event, BOT)

    assert trigger is not None and trigger.content == question


def test_a_reply_to_the_bot_triggers_as_a_reply() -> None:
    trigger = answer_trigger(reply_to(BOT, "and what about Bob?"), BOT)

    assert trigger is not None
    assert (trigger.kind, trigger.replied_to_bot) == (TriggerKind.REPLY, True)
    assert trigger.content == "and what about Bob?"


def test_a_reply_that_pings_the_bot_is_still_a_reply() -> None:
    trigger = answer_trigger(reply_to(BOT, "and Bob?", ping=True), BOT)

    assert trigger is not None and trigger.kind == TriggerKind.REPLY


def test_a_reply_to_someone_else_that_mentions_the_bot_is_a_mention() -> None:
    event = reply_to(BOB, f"<@{BOT}> is that right?", ping=True)
    event["d"]["mentions"].append(user(BOT, bot=True))

    trigger = answer_trigger(event, BOT)

    assert trigger is not None
    assert (trigger.kind, trigger.replied_to_bot, trigger.content) == (
        TriggerKind.MENTION,
        False,
        "is that right?",
    )


def test_a_direct_message_triggers_without_a_mention() -> None:
    event = message(ALICE, "what do you know about me?", START_MS, guild=None)

    trigger = answer_trigger(event, BOT)

    assert trigger is not None
    assert (trigger.kind, trigger.guild_id) == (TriggerKind.DIRECT, None)
    assert trigger.author_name == "Alice"


def test_the_server_nickname_is_the_name_the_channel_sees() -> None:
    event = mention()
    event["d"]["member"]["nick"] = "Ali\u202e (climber)"

    trigger = answer_trigger(event, BOT)

    assert trigger is not None and trigger.author_name == "Ali (climber)"


def test_a_trigger_round_trips_as_the_json_answer_function_receives() -> None:
    trigger = answer_trigger(reply_to(BOT, "and Bob?"), BOT)
    assert trigger is not None

    assert AnswerTrigger.model_validate(trigger.model_dump(mode="json")) == trigger


# -- what does not ---------------------------------------------------------------------------


def test_the_bots_own_message_never_triggers() -> None:
    event = message(BOT, f"<@{BOT}> talking to myself", START_MS, guild=None)
    event["d"]["mentions"] = [user(BOT, bot=True)]

    assert answer_trigger(event, BOT) is None


def test_another_bots_message_never_triggers_even_a_mention_or_a_dm() -> None:
    for event in (mention(), message(ALICE, "hello", START_MS, guild=None), reply_to(BOT, "hi")):
        event["d"]["author"] = {"id": OTHER_BOT, "username": "otherbot", "bot": True}
        assert answer_trigger(event, BOT) is None


def test_a_webhook_or_system_message_never_triggers() -> None:
    webhook = mention()
    webhook["d"]["webhook_id"] = OTHER_BOT
    pin_notice = reply_to(BOT, "")  # "Alice pinned a message" references the bot's message
    pin_notice["d"]["type"] = 6
    system = mention()
    system["d"]["author"]["system"] = True

    for event in (webhook, pin_notice, system):
        assert answer_trigger(event, BOT) is None


def test_a_forward_of_the_bots_message_is_no_reply() -> None:
    event = reply_to(BOT, "look at this")
    event["d"]["message_reference"]["type"] = 1

    assert answer_trigger(event, BOT) is None


def test_everyone_or_a_role_mention_does_not_count_as_a_mention() -> None:
    everyone = message(ALICE, "@everyone what's up?", START_MS)
    everyone["d"]["mention_everyone"] = True
    role = message(ALICE, f"<@&{ROLE}> what's up?", START_MS)
    role["d"]["mention_roles"] = [ROLE]
    named = message(ALICE, f"<@{BOT}> in text, but Discord did not mention it", START_MS)

    for event in (everyone, role, named):
        assert answer_trigger(event, BOT) is None


def test_a_message_to_nobody_in_a_server_does_not_trigger() -> None:
    assert answer_trigger(message(ALICE, "hello all", START_MS), BOT) is None
    assert answer_trigger(reply_to(BOB, "sure"), BOT) is None


def test_a_reply_to_a_deleted_message_is_no_reply_to_the_bot() -> None:
    event = reply_to(BOT, "and Bob?")
    event["d"]["referenced_message"] = None

    assert answer_trigger(event, BOT) is None


@pytest.mark.parametrize("content", ["", f"<@{BOT}>", f"  <@!{BOT}> , ", f"<@{BOT}> <@{BOT}>"])
def test_nothing_left_after_the_mention_does_not_trigger(content: str) -> None:
    event = message(ALICE, content, START_MS)
    event["d"]["mentions"] = [user(BOT, bot=True)]

    assert answer_trigger(event, BOT) is None


def test_a_question_made_of_control_characters_does_not_trigger() -> None:
    noise = "".join(chr(c) for c in range(32) if c not in (9, 10)) + "\u200b\u202e\ufeff\x7f"

    assert answer_trigger(mention(noise * 50), BOT) is None
    assert answer_trigger(message(ALICE, noise, START_MS, guild=None), BOT) is None


@pytest.mark.parametrize("bot_user_id", [None, "", "@memory-bot", f"{BOT}\n"])
def test_without_the_bots_own_id_nothing_triggers(bot_user_id: str | None) -> None:
    assert answer_trigger(message(ALICE, "hi", START_MS, guild=None), bot_user_id) is None
    assert answer_trigger(mention(), bot_user_id) is None


def test_other_dispatch_events_never_trigger() -> None:
    event = mention()
    for name in ("MESSAGE_UPDATE", "MESSAGE_DELETE", "GUILD_CREATE", None):
        assert answer_trigger({**event, "t": name}, BOT) is None


def _malformed() -> list[Any]:
    good = mention()
    cases: list[Any] = [None, "MESSAGE_CREATE", [], {"t": "MESSAGE_CREATE"}, {"d": good["d"]}]
    for path, value in [
        (("d",), "not an object"),
        (("d", "author"), None),
        (("d", "author"), "Alice"),
        (("d", "author", "id"), 300000000000000001),
        (("d", "id"), None),
        (("d", "id"), "12ab"),
        (("d", "channel_id"), "../../users/@me"),
        (("d", "guild_id"), 100000000000000001),
        (("d", "content"), ["a", "list"]),
        (("d", "mentions"), "everyone"),
        (("d", "mentions"), [None, 7]),
        (("d", "type"), "0"),
        (("d", "type"), True),
        (("d", "member"), "nick"),
        (("d", "message_reference"), "ref"),
        (("d", "referenced_message"), {"author": "bot"}),
    ]:
        event = copy.deepcopy(good)
        target = event
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        cases.append(event)
    return cases


@pytest.mark.parametrize("event", _malformed())
def test_a_malformed_event_never_raises(event: Any) -> None:
    trigger = answer_trigger(event, BOT)

    # Some breakages leave a valid message (a broken `mentions` list is no mention, a broken
    # member no nickname); none raises, and none triggers on a broken id.
    if trigger is not None:
        assert trigger.author_id == ALICE and trigger.content


# -- bounds -----------------------------------------------------------------------------------


def test_a_message_of_megabytes_is_bounded_and_cheap() -> None:
    event = mention("why? " * 1_000_000)  # 5 MB

    started = time.perf_counter()
    trigger = answer_trigger(event, BOT)
    elapsed = time.perf_counter() - started

    assert trigger is not None
    assert len(trigger.content) <= MAX_QUERY_CHARS
    assert trigger.content.startswith("why? why?") and trigger.content.endswith("…")
    assert elapsed < 0.5


def test_the_question_keeps_its_lines_and_loses_its_controls() -> None:
    raw = f"<@{BOT}> first line\x00\x1b[31m\r\nsecond\u200b line\u2028third"

    assert question_text(raw, BOT) == "first line[31m\nsecond line\nthird"


def test_a_long_name_is_clipped() -> None:
    event = mention()
    event["d"]["author"]["global_name"] = "N" * 10_000

    trigger = answer_trigger(event, BOT)

    assert trigger is not None and trigger.author_name is not None
    assert len(trigger.author_name) <= 80

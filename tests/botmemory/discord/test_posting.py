"""Posting answers through Discord's REST API (the fake on 127.0.0.1): a reply that pings
nobody but whom it may, the typing indicator, 429 waited out exactly as advertised, 403
never retried, no message posted twice; and long answers split at sentence ends."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from botmemory.discord.errors import DiscordApiError, JsonErrorCode
from botmemory.discord.rest import DiscordApi, split_message
from botmemory.text import DISCORD_MESSAGE_CHARS
from localrun.gateway import ALICE, BOB, CHANNEL
from tests.support.fake_discord import BOT_TOKEN, BOT_USER_ID, FakeDiscordRest, fake_discord_fixture  # noqa: F401

MESSAGE = "300000000000000777"
MESSAGES_PATH = f"/channels/{CHANNEL}/messages"


class SleepRecorder:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def api(fake_discord: FakeDiscordRest, sleeps: SleepRecorder) -> Iterator[DiscordApi]:
    with DiscordApi(BOT_TOKEN, base_url=fake_discord.url, sleep=sleeps) as client:
        yield client


# -- create_message ----------------------------------------------------------------------------


def test_a_reply_references_the_message_and_pings_nobody(
    api: DiscordApi, fake_discord: FakeDiscordRest
) -> None:
    posted = api.create_message(CHANNEL, "Alice likes the Alps. @everyone", reply_to=MESSAGE)

    [request] = fake_discord.requests
    assert (request.method, request.path) == ("POST", MESSAGES_PATH)
    assert request.authorization == f"Bot {BOT_TOKEN}"
    assert request.body["content"] == "Alice likes the Alps. @everyone"
    assert request.body["message_reference"] == {"message_id": MESSAGE, "fail_if_not_exists": False}
    assert request.body["allowed_mentions"] == {"parse": [], "users": [], "replied_user": False}
    # Discord's message object comes back, for the caller to record as an observation.
    assert posted["author"]["id"] == BOT_USER_ID and posted["author"]["bot"] is True
    assert posted["message_reference"]["message_id"] == MESSAGE
    assert posted["content"] == request.body["content"] and posted["id"]
    assert posted["timestamp"]


def test_the_replied_person_is_pinged_only_when_allowed(
    api: DiscordApi, fake_discord: FakeDiscordRest
) -> None:
    api.create_message(CHANNEL, "yes", reply_to=MESSAGE, reply_to_author=ALICE, allowed_users=[])
    api.create_message(
        CHANNEL, "yes", reply_to=MESSAGE, reply_to_author=ALICE, allowed_users=[ALICE]
    )
    api.create_message(CHANNEL, "yes", reply_to=MESSAGE, allowed_users=[ALICE])  # author unknown
    api.create_message(
        CHANNEL, f"<@{BOB}> knows", reply_to=MESSAGE, reply_to_author=ALICE, allowed_users=[BOB]
    )

    mentions = [r.body["allowed_mentions"] for r in fake_discord.requests]
    assert mentions == [
        {"parse": [], "users": [], "replied_user": False},
        {"parse": [], "users": [ALICE], "replied_user": True},
        {"parse": [], "users": [ALICE], "replied_user": False},
        {"parse": [], "users": [BOB], "replied_user": False},
    ]


def test_a_plain_message_has_no_reference(api: DiscordApi, fake_discord: FakeDiscordRest) -> None:
    posted = api.create_message(CHANNEL, "hello")

    [request] = fake_discord.requests
    assert "message_reference" not in request.body
    assert request.body["allowed_mentions"] == {"parse": [], "users": [], "replied_user": False}
    assert posted["type"] == 0


@pytest.mark.parametrize(
    ("content", "kwargs"),
    [
        ("", {}),
        ("   \n", {}),
        ("x" * (DISCORD_MESSAGE_CHARS + 1), {}),
        ("ok", {"reply_to": "../../users/@me"}),
        ("ok", {"allowed_users": ["@everyone"]}),
        ("ok", {"nonce": "n" * 26}),
    ],
)
def test_a_message_discord_would_refuse_is_refused_before_sending(
    api: DiscordApi, fake_discord: FakeDiscordRest, content: str, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(ValueError):
        api.create_message(CHANNEL, content, **kwargs)
    with pytest.raises(ValueError):
        api.create_message("not-a-channel", "ok")
    assert fake_discord.requests == []


def test_a_lost_answer_retried_never_posts_twice(
    fake_discord: FakeDiscordRest, sleeps: SleepRecorder
) -> None:
    # The first attempt reaches Discord, but its answer never comes back: the retry sends the
    # same enforced nonce, and Discord returns the message it already created.
    lost = {"first": True}

    with httpx.Client() as wire:

        def lose_the_first_answer(request: httpx.Request) -> httpx.Response:
            forwarded = httpx.Request(
                request.method, request.url, headers=request.headers, content=request.content
            )
            response = wire.send(forwarded)
            response.read()
            if lost["first"]:
                lost["first"] = False
                raise httpx.ReadTimeout("answer lost", request=request)
            return httpx.Response(
                response.status_code, headers=response.headers, content=response.content
            )

        transport = httpx.MockTransport(lose_the_first_answer)
        with DiscordApi(
            BOT_TOKEN, base_url=fake_discord.url, sleep=sleeps, transport=transport
        ) as api:
            posted = api.create_message(CHANNEL, "only once", reply_to=MESSAGE)

    sent = fake_discord.requests_matching("POST", MESSAGES_PATH)
    assert len(sent) == 2 and sent[0].body["nonce"] == sent[1].body["nonce"]
    assert sent[0].body["enforce_nonce"] is True
    assert [m["id"] for m in fake_discord.channel_messages[CHANNEL]] == [posted["id"]]


def test_a_callers_nonce_makes_its_own_retry_safe(
    api: DiscordApi, fake_discord: FakeDiscordRest
) -> None:
    first = api.create_message(CHANNEL, "hello", nonce=f"{MESSAGE}-0")
    again = api.create_message(CHANNEL, "hello", nonce=f"{MESSAGE}-0")

    assert first["id"] == again["id"]
    assert len(fake_discord.channel_messages[CHANNEL]) == 1


def test_each_post_gets_its_own_nonce(api: DiscordApi, fake_discord: FakeDiscordRest) -> None:
    api.create_message(CHANNEL, "one")
    api.create_message(CHANNEL, "two")

    nonces = [r.body["nonce"] for r in fake_discord.requests]
    assert len(set(nonces)) == 2 and all(0 < len(n) <= 25 for n in nonces)
    assert len(fake_discord.channel_messages[CHANNEL]) == 2


# -- typing ------------------------------------------------------------------------------------


def test_typing_posts_to_the_channels_typing_route(
    api: DiscordApi, fake_discord: FakeDiscordRest
) -> None:
    api.trigger_typing(CHANNEL)

    [request] = fake_discord.requests
    assert (request.method, request.path) == ("POST", f"/channels/{CHANNEL}/typing")
    assert request.authorization == f"Bot {BOT_TOKEN}"
    assert request.body is None


# -- 429 and 403 -------------------------------------------------------------------------------


def test_a_429_waits_exactly_the_advertised_delay_then_posts(
    api: DiscordApi, fake_discord: FakeDiscordRest, sleeps: SleepRecorder
) -> None:
    # Discord's header rounds up to whole seconds ("2"); the body's 1.5 is the precise value.
    fake_discord.rate_limit_once(retry_after=1.5, method="POST")

    posted = api.create_message(CHANNEL, "after the wait", reply_to=MESSAGE)

    assert sleeps.calls == [1.5]
    assert len(fake_discord.requests_matching("POST", MESSAGES_PATH)) == 2
    assert [m["id"] for m in fake_discord.channel_messages[CHANNEL]] == [posted["id"]]


def test_a_global_429_without_a_body_waits_as_the_header_says(
    api: DiscordApi, fake_discord: FakeDiscordRest, sleeps: SleepRecorder
) -> None:
    fake_discord.script(
        429, None, {"Retry-After": "3", "X-RateLimit-Global": "true", "X-RateLimit-Scope": "global"}
    )

    api.trigger_typing(CHANNEL)

    assert sleeps.calls == [3.0]
    assert len(fake_discord.requests) == 2


@pytest.mark.parametrize(
    ("code", "text"),
    [(JsonErrorCode.MISSING_ACCESS, "Missing Access"), (JsonErrorCode.MISSING_PERMISSIONS, "")],
)
def test_a_403_is_never_retried_and_says_why(
    api: DiscordApi,
    fake_discord: FakeDiscordRest,
    sleeps: SleepRecorder,
    code: JsonErrorCode,
    text: str,
) -> None:
    fake_discord.forbid(CHANNEL, code)

    with pytest.raises(DiscordApiError) as caught:
        api.create_message(CHANNEL, "hello", reply_to=MESSAGE)

    error = caught.value
    assert (error.status, error.code, error.forbidden) == (403, code, True)
    assert text in str(error) and f"POST {MESSAGES_PATH}" in str(error)
    assert BOT_TOKEN not in str(error)
    assert sleeps.calls == []
    assert len(fake_discord.requests) == 1
    with pytest.raises(DiscordApiError) as typing_refused:
        api.trigger_typing(CHANNEL)
    assert typing_refused.value.forbidden and len(fake_discord.requests) == 2


def test_other_errors_are_not_forbidden(api: DiscordApi, fake_discord: FakeDiscordRest) -> None:
    fake_discord.script(404, {"message": "Unknown Channel", "code": 10003})

    with pytest.raises(DiscordApiError) as caught:
        api.create_message(CHANNEL, "hello")

    assert (caught.value.code, caught.value.forbidden) == (JsonErrorCode.UNKNOWN_CHANNEL, False)


def test_an_answer_split_and_posted_stays_within_discords_limit(
    api: DiscordApi, fake_discord: FakeDiscordRest
) -> None:
    answer = " ".join(f"Sentence number {i} says something about the Alps." for i in range(150))

    for index, chunk in enumerate(split_message(answer)):
        api.create_message(CHANNEL, chunk, reply_to=MESSAGE if index == 0 else None)

    posted = fake_discord.channel_messages[CHANNEL]
    assert len(posted) > 1  # the fake refuses content over 2,000 characters, as Discord does
    assert " ".join(m["content"] for m in posted) == answer
    assert [("message_reference" in m) for m in posted] == [True] + [False] * (len(posted) - 1)


# -- split_message -----------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    return text.split()


def test_a_short_answer_is_one_chunk() -> None:
    assert split_message("  Hello there.  ") == ["Hello there."]
    assert split_message("x" * DISCORD_MESSAGE_CHARS) == ["x" * DISCORD_MESSAGE_CHARS]
    assert split_message("") == [] and split_message(" \n ") == []


def test_chunks_end_at_sentence_ends_and_keep_every_character() -> None:
    sentences = [f"This is sentence {i}, which is{' quite' * (i % 7)} long!" for i in range(300)]
    text = " ".join(sentences)

    chunks = split_message(text, 500)

    assert all(0 < len(c) <= 500 for c in chunks)
    assert all(re.search(r"[.!?]$", c) for c in chunks)
    assert " ".join(chunks) == text


def test_line_breaks_are_sentence_ends_too() -> None:
    text = "\n".join(f"- item {i}: a thing to remember" for i in range(100))

    chunks = split_message(text, 300)

    assert all(0 < len(c) <= 300 for c in chunks)
    assert "\n".join(chunks) == text


def test_without_sentence_ends_it_splits_at_whitespace() -> None:
    text = " ".join(["word"] * 1000)

    chunks = split_message(text, 97)

    assert all(0 < len(c) <= 97 and c == c.strip() for c in chunks)
    assert all(set(c.split()) == {"word"} for c in chunks)  # no word cut in two
    assert _words(" ".join(chunks)) == _words(text)


def test_an_early_sentence_end_does_not_make_a_tiny_chunk() -> None:
    text = "Yes. " + " ".join(["word"] * 100)

    chunks = split_message(text, 100)

    assert chunks[0] != "Yes." and len(chunks[0]) > 50


def test_text_without_spaces_is_cut_hard_and_nothing_is_lost() -> None:
    text = "https://example.com/" + "a" * 4990

    chunks = split_message(text, 2000)

    assert [len(c) for c in chunks] == [2000, 2000, 1010]
    assert "".join(chunks) == text


def test_a_hard_cut_keeps_accents_and_joined_emoji_whole() -> None:
    accented = "e\u0301" * 30  # é as e + combining acute
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467" * 10  # ZWJ sequences

    for text in (accented, family):
        chunks = split_message(text, 7)
        assert "".join(chunks) == text and all(0 < len(c) <= 7 for c in chunks)
        assert not any(c[0] in "\u0301\u200d" or c[-1] == "\u200d" for c in chunks)


@pytest.mark.parametrize("limit", [1, 2, 3, 10, 64])
def test_any_text_any_limit_no_empty_chunk_nothing_lost(limit: int) -> None:
    text = "Ünïcode, spaces\tand\nlines!  Also… “quotes.” (Brackets.) " * 20 + "end"

    chunks = split_message(text, limit)

    assert all(c and c.strip() == c and len(c) <= limit for c in chunks)
    assert "".join("".join(chunks).split()) == "".join(text.split())


def test_a_limit_below_one_is_an_error() -> None:
    with pytest.raises(ValueError):
        split_message("hello", 0)


def test_split_message_is_the_one_in_text_py() -> None:
    from botmemory import text
    from botmemory.discord import rest as discord_api

    assert discord_api.split_message is text.split_message
    assert json.dumps(split_message("a. b.", 2)) == '["a.", "b."]'

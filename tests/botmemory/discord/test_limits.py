"""Discord's rate limits kept ahead: the REST client reads `X-RateLimit-*` and never sends a
request it knows will be refused (each 429 counts toward Discord's invalid-request ban).

Through AnswerFunction as the template wires it, with the fake Discord on 127.0.0.1
enforcing its buckets: a six-part answer posts with no 429, and a wait past the
invocation's end is not taken. Then the client alone, on a clock of the test's that moves
only when the client sleeps: the global limit, headers missing or malformed, `Retry-After`
as an HTTP-date, waits bounded by the time left.
"""

from __future__ import annotations

from email.utils import formatdate
from typing import Any

import httpx
import pytest

from botmemory.discord.errors import DiscordApiError, DiscordRateLimited
from botmemory.discord.limits import RateLimits, retry_after, route_key
from botmemory.discord.rest import DiscordApi
from botmemory.text import split_message
from localrun import gateway as gw
from tests.botmemory.answering.test_answerer import Bot, completion, mention
from tests.conftest import START_MS
from tests.support import lambda_local
from tests.support.fake_discord import BOT_TOKEN, FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.fake_providers import ScriptServer

OTHER_CHANNEL = "200000000000000002"
BUCKET = "abcd1234"
# A reply the bot posts as six messages (split at sentence ends, 2,000 characters each).
LONG_REPLY = " ".join(
    f"Sentence number {i} tells a little more about the long story of the hiking trip."
    for i in range(125)
)


@pytest.fixture
def bot(
    monkeypatch: pytest.MonkeyPatch,
    fake_discord: FakeDiscordRest,
    dynamodb: Any,
    chat_server: ScriptServer,
) -> Bot:
    chat = {
        "CHAT_MODEL": "openai:test-chat",
        "CHAT_MODEL_BASE_URL": chat_server.base_url,
        "CHAT_MODEL_API_KEY": "sk-test-chat",
    }
    return Bot(monkeypatch, fake_discord, dynamodb, chat)


# -- through AnswerFunction ---------------------------------------------------------------------


def test_a_six_part_answer_posts_every_part_without_a_429(
    bot: Bot, fake_discord: FakeDiscordRest, chat_server: ScriptServer
) -> None:
    assert len(split_message(LONG_REPLY)) == 6
    # Discord's shape, shortened: five posts per channel per window (here 0.2 s).
    fake_discord.enforce_buckets(limit=5, window=0.2)
    chat_server.script.append(completion(LONG_REPLY))

    bot.say(mention(gw.ALICE, "tell me the whole story", START_MS))

    assert fake_discord.rate_limited == []
    assert [p["content"] for p in bot.posts()] == split_message(LONG_REPLY)
    assert bot.reports[-1]["status"] == "answered" and bot.reports[-1]["posted"] == 6


def test_a_wait_past_the_invocation_s_end_cuts_the_answer_short_unsent(
    bot: Bot,
    fake_discord: FakeDiscordRest,
    chat_server: ScriptServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The channel's bucket resets in 20 s (under the client's 30 s cap); the invocation has 5.
    fake_discord.enforce_buckets(limit=5, window=20.0)
    monkeypatch.setattr(
        lambda_local.LambdaContext, "get_remaining_time_in_millis", lambda self: 5_000
    )
    chat_server.script.append(completion(LONG_REPLY))

    bot.say(mention(gw.ALICE, "tell me the whole story", START_MS))

    # The five parts posted stand and are remembered; the sixth is never sent into a 429.
    assert len(bot.posts()) == 5
    assert fake_discord.rate_limited == []
    report = bot.reports[-1]
    assert report["status"] == "post_cut_short"
    assert report["posted"] == 5 and report["recorded"] == 5


# -- the client alone --------------------------------------------------------------------------


class Clock:
    """Monotonic time that moves only when the client sleeps; the sleeps are recorded."""

    def __init__(self) -> None:
        self.at = 1000.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 3))
        self.at += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def client(
    fake: FakeDiscordRest, clock: Clock, *, per_second: int = 50, **kwargs: Any
) -> DiscordApi:
    limits = RateLimits(clock=clock.now, per_second=per_second)
    return DiscordApi(BOT_TOKEN, base_url=fake.url, sleep=clock.sleep, rate_limits=limits, **kwargs)


def posted(remaining: str, reset_after: str, bucket: str | None = BUCKET) -> dict[str, Any]:
    """A successful post's answer with these rate-limit headers."""
    headers = {"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": remaining}
    headers["X-RateLimit-Reset-After"] = reset_after
    if bucket is not None:
        headers["X-RateLimit-Bucket"] = bucket
    return {"status": 200, "body": {"id": "900000000000000099"}, "headers": headers}


def test_remaining_zero_holds_the_next_post_until_the_reset(
    fake_discord: FakeDiscordRest, clock: Clock
) -> None:
    fake_discord.script(**posted("0", "1.5"), method="POST")
    with client(fake_discord, clock) as api:
        api.create_message(gw.CHANNEL, "one")
        api.create_message(gw.CHANNEL, "two")

    assert clock.sleeps == [1.5]
    assert len(fake_discord.requests) == 2


def test_a_bucket_is_per_channel_and_shared_by_routes_with_its_hash(
    fake_discord: FakeDiscordRest, clock: Clock
) -> None:
    fake_discord.script(**posted("0", "1.5"), method="POST")
    with client(fake_discord, clock) as api:
        api.create_message(gw.CHANNEL, "one")
        api.create_message(OTHER_CHANNEL, "elsewhere")  # another channel: its own limit
        assert clock.sleeps == []
        # Typing in the channel answers with the same bucket hash: it shares that state.
        fake_discord.script(**posted("0", "2.0"), path_contains="/typing")
        api.trigger_typing(gw.CHANNEL)
        api.create_message(gw.CHANNEL, "two")

    assert clock.sleeps == [2.0]


def test_a_global_429_holds_back_every_route_until_it_is_over(
    fake_discord: FakeDiscordRest, clock: Clock
) -> None:
    refusal = {"message": "You are being rate limited.", "retry_after": 2.5, "global": True}
    fake_discord.script(429, refusal, {"X-RateLimit-Scope": "global"})
    with client(fake_discord, clock, max_attempts=1) as api:
        with pytest.raises(DiscordApiError) as caught:
            api.create_message(gw.CHANNEL, "one")
        assert caught.value.status == 429
        api.trigger_typing(OTHER_CHANNEL)  # another route, another channel: held too

    assert clock.sleeps == [2.5]
    assert len(fake_discord.requests) == 2


def test_a_route_429_holds_its_bucket_only(fake_discord: FakeDiscordRest, clock: Clock) -> None:
    refusal = {"message": "You are being rate limited.", "retry_after": 2.5, "global": False}
    fake_discord.script(429, refusal, {"X-RateLimit-Scope": "user", "X-RateLimit-Bucket": BUCKET})
    with client(fake_discord, clock, max_attempts=1) as api:
        with pytest.raises(DiscordApiError):
            api.create_message(gw.CHANNEL, "one")
        api.trigger_typing(OTHER_CHANNEL)
        assert clock.sleeps == []
        api.create_message(gw.CHANNEL, "again")  # never sent before the bucket resets

    assert clock.sleeps == [2.5]


@pytest.mark.parametrize(
    ("remaining", "reset_after"),
    [("abc", "1.5"), ("-1", "1.5"), ("0", "soon"), ("0", "nan"), ("0", "-2"), ("0", "")],
)
def test_malformed_counters_teach_nothing_and_a_429_is_still_waited_out(
    fake_discord: FakeDiscordRest, clock: Clock, remaining: str, reset_after: str
) -> None:
    fake_discord.script(**posted(remaining, reset_after), method="POST")
    with client(fake_discord, clock) as api:
        api.create_message(gw.CHANNEL, "one")
        fake_discord.rate_limit_once(retry_after=0.75)
        api.create_message(gw.CHANNEL, "two")  # sent, refused, waited out, sent again

    assert clock.sleeps == [0.75]
    assert len(fake_discord.requests) == 3


@pytest.mark.parametrize("bucket", [None, "", "../../etc", "x" * 65, "a b"])
def test_a_missing_or_malformed_bucket_keeps_the_state_under_the_route(
    fake_discord: FakeDiscordRest, clock: Clock, bucket: str | None
) -> None:
    fake_discord.script(**posted("0", "1.5", bucket=bucket), method="POST")
    with client(fake_discord, clock) as api:
        api.create_message(gw.CHANNEL, "one")
        api.create_message(gw.CHANNEL, "two")

    assert clock.sleeps == [1.5]
    assert len(fake_discord.requests) == 2


def test_retry_after_as_an_http_date_is_waited_out(
    fake_discord: FakeDiscordRest, clock: Clock
) -> None:
    import time

    # No body: the header's date, against the answer's own Date (both whole seconds).
    fake_discord.script(429, None, {"Retry-After": formatdate(time.time() + 5, usegmt=True)})
    with client(fake_discord, clock) as api:
        api.trigger_typing(gw.CHANNEL)

    (slept,) = clock.sleeps
    assert 4 <= slept <= 6
    assert len(fake_discord.requests) == 2


def test_an_http_date_is_read_against_the_answer_s_date() -> None:
    def answer(headers: dict[str, str]) -> httpx.Response:
        return httpx.Response(429, headers=headers)

    date = "Tue, 01 Dec 2026 16:00:00 GMT"
    assert retry_after(answer({"Retry-After": "Tue, 01 Dec 2026 16:00:07 GMT", "Date": date})) == 7
    # A date already past is no wait; without Date, this machine's clock is the reference.
    assert retry_after(answer({"Retry-After": "Tue, 01 Dec 2026 15:59:00 GMT", "Date": date})) == 0
    at_noon = 1_795_000_000.0
    header = {"Retry-After": formatdate(at_noon + 3, usegmt=True)}
    assert retry_after(answer(header), wall=lambda: at_noon) == 3
    # An unreadable date says nothing: the next header is asked.
    garbled = {"Retry-After": "next Tuesday", "X-RateLimit-Reset-After": "1.25"}
    assert retry_after(answer(garbled)) == 1.25
    assert retry_after(answer({"Retry-After": "next Tuesday"})) is None


def test_a_known_wait_past_the_time_left_raises_unsent(
    fake_discord: FakeDiscordRest, clock: Clock
) -> None:
    fake_discord.script(**posted("0", "1.5"), method="POST")
    # 3 s left, less the margin the request itself needs: 1.5 s is too long.
    with client(fake_discord, clock, time_left_ms=lambda: 3_000) as api:
        api.create_message(gw.CHANNEL, "one")
        with pytest.raises(DiscordRateLimited) as caught:
            api.create_message(gw.CHANNEL, "two")

    assert caught.value.status == 429 and caught.value.retry_after == 1.5
    assert "not sent" in str(caught.value) and BOT_TOKEN not in str(caught.value)
    assert clock.sleeps == [] and len(fake_discord.requests) == 1


def test_a_429_asking_past_the_time_left_is_not_waited(
    fake_discord: FakeDiscordRest, clock: Clock
) -> None:
    fake_discord.rate_limit_once(retry_after=1.5)
    with client(fake_discord, clock, time_left_ms=lambda: 3_000) as api:
        with pytest.raises(DiscordApiError) as caught:
            api.trigger_typing(gw.CHANNEL)
        assert caught.value.status == 429 and caught.value.retry_after == 1.5
        # The bucket stays known: the next request is not sent into it either.
        with pytest.raises(DiscordRateLimited):
            api.trigger_typing(gw.CHANNEL)

    assert clock.sleeps == [] and len(fake_discord.requests) == 1


def test_with_time_enough_the_same_wait_is_taken(
    fake_discord: FakeDiscordRest, clock: Clock
) -> None:
    fake_discord.script(**posted("0", "1.5"), method="POST")
    with client(fake_discord, clock, time_left_ms=lambda: 10_000) as api:
        api.create_message(gw.CHANNEL, "one")
        api.create_message(gw.CHANNEL, "two")

    assert clock.sleeps == [1.5]


def test_the_global_pace_is_kept(fake_discord: FakeDiscordRest, clock: Clock) -> None:
    with client(fake_discord, clock, per_second=3) as api:
        for _ in range(4):
            api.trigger_typing(gw.CHANNEL)

    assert clock.sleeps == [1.0]
    assert len(fake_discord.requests) == 4


def test_route_keys_name_the_top_level_resource_and_hold_no_token() -> None:
    assert route_key("POST", f"/channels/{gw.CHANNEL}/messages") == (
        "POST /channels/{channel_id}/messages",
        f"channels/{gw.CHANNEL}",
    )
    assert route_key("put", "/applications/5/guilds/7/commands") == (
        "PUT /applications/{id}/guilds/{guild_id}/commands",
        "guilds/7",
    )
    assert route_key("GET", "/applications/5/commands") == ("GET /applications/{id}/commands", "")
    template, major = route_key("PATCH", "/webhooks/5/secret-token/messages/@original")
    assert template == "PATCH /webhooks/{webhook_id}/{webhook_token}/messages/@original"
    assert major.startswith("webhooks/5/") and "secret-token" not in major
    assert route_key("PATCH", "/webhooks/5/other-token/messages/@original")[1] != major


def test_buckets_already_reset_are_forgotten_past_a_thousand(clock: Clock) -> None:
    limits = RateLimits(clock=clock.now)
    for n in range(1_001):
        answer = httpx.Response(
            200, headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset-After": "1"}
        )
        limits.learn(route_key("POST", f"/channels/{n + 1}/messages"), answer, None)
    clock.sleep(2)
    fresh = httpx.Response(
        200, headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset-After": "1"}
    )
    limits.learn(route_key("POST", "/channels/999999/messages"), fresh, None)

    assert len(limits._buckets) == 1
    assert limits.reserve(route_key("POST", "/channels/999999/messages")) is not None

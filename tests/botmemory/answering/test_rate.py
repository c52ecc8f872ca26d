"""The answer rate limits: per person and per channel, in fixed windows; the first request
over a limit is refused once, the rest get silence, a new window answers again; one
member's requests over their own limit never use up the channel's answers."""

from __future__ import annotations

from typing import Any

import pytest

from botmemory.answering.rate import AnswerRateLimiter, RateDecision, decide
from botmemory.clock import ManualClock
from botmemory.people.erasure import Eraser
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.repository import MemoryRepository
from localrun.gateway import ALICE, BOB, CAROL, CHANNEL, GUILD
from tests.conftest import START_MS, TABLE, scan_all

OTHER_CHANNEL = "200000000000000002"
WINDOW_S = 600

ALLOW, REFUSE, SILENT = RateDecision.ALLOW, RateDecision.REFUSE_ONCE, RateDecision.SILENT


class CountingClient:
    """The DynamoDB client, counting the calls made through it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def update_item(self, **request: Any) -> Any:
        self.calls.append("UpdateItem")
        return self.inner.update_item(**request)


def limiter(
    dynamodb: Any, clock: ManualClock, *, person: int = 3, channel: int = 5
) -> AnswerRateLimiter:
    settings = Settings(
        table_name=TABLE,
        answer_rate_window_seconds=WINDOW_S,
        answer_rate_per_person=person,
        answer_rate_per_channel=channel,
    )
    return AnswerRateLimiter(MemoryRepository(dynamodb, TABLE), settings, clock)


@pytest.fixture
def window_start(clock: ManualClock) -> ManualClock:
    """The clock at the start of a window, so a test's requests all fall in one."""
    window_ms = WINDOW_S * 1000
    clock.set((START_MS // window_ms + 1) * window_ms)
    return clock


def test_the_defaults_a_small_server_would_pick() -> None:
    settings = Settings()
    assert (
        settings.answer_rate_window_seconds,
        settings.answer_rate_per_person,
        settings.answer_rate_per_channel,
    ) == (600, 5, 20)


@pytest.mark.parametrize(
    ("count", "decision"), [(1, ALLOW), (3, ALLOW), (4, REFUSE), (5, SILENT), (99, SILENT)]
)
def test_the_counter_itself_says_refuse_once_then_silent(
    count: int, decision: RateDecision
) -> None:
    assert decide(count, 3) == decision


def test_a_person_over_their_limit_is_refused_once_then_silent(
    dynamodb: Any, window_start: ManualClock
) -> None:
    rate = limiter(dynamodb, window_start, person=3)

    decisions = [rate.check(GUILD, CHANNEL, ALICE) for _ in range(6)]

    assert decisions == [ALLOW, ALLOW, ALLOW, REFUSE, SILENT, SILENT]
    # Someone else in the same channel is still answered.
    assert rate.check(GUILD, CHANNEL, BOB) == ALLOW


def test_the_person_limit_holds_across_the_channels_of_a_server(
    dynamodb: Any, window_start: ManualClock
) -> None:
    rate = limiter(dynamodb, window_start, person=2)

    assert rate.check(GUILD, CHANNEL, ALICE) == ALLOW
    assert rate.check(GUILD, OTHER_CHANNEL, ALICE) == ALLOW
    assert rate.check(GUILD, OTHER_CHANNEL, ALICE) == REFUSE
    # Another scope (direct messages) counts on its own.
    assert rate.check("dm", "200000000000000003", ALICE) == ALLOW


def test_a_channel_over_its_limit_is_refused_once_then_silent(
    dynamodb: Any, window_start: ManualClock
) -> None:
    rate = limiter(dynamodb, window_start, person=3, channel=4)
    people = [ALICE, BOB, ALICE, BOB]

    assert [rate.check(GUILD, CHANNEL, p) for p in people] == [ALLOW] * 4
    assert rate.check(GUILD, CHANNEL, CAROL) == REFUSE
    assert rate.check(GUILD, CHANNEL, CAROL) == SILENT
    assert rate.check(GUILD, OTHER_CHANNEL, CAROL) == ALLOW  # another channel, its own count


def test_a_new_window_answers_again(dynamodb: Any, window_start: ManualClock) -> None:
    rate = limiter(dynamodb, window_start, person=1, channel=2)
    assert [rate.check(GUILD, CHANNEL, ALICE) for _ in range(3)] == [ALLOW, REFUSE, SILENT]

    window_start.advance(seconds=WINDOW_S - 1)  # still the same window
    assert rate.check(GUILD, CHANNEL, ALICE) == SILENT
    window_start.advance(seconds=1)

    assert [rate.check(GUILD, CHANNEL, ALICE) for _ in range(3)] == [ALLOW, REFUSE, SILENT]


def test_one_member_asking_again_and_again_cannot_silence_a_channel(
    dynamodb: Any, window_start: ManualClock
) -> None:
    rate = limiter(dynamodb, window_start, person=2, channel=3)

    spam = [rate.check(GUILD, CHANNEL, ALICE) for _ in range(20)]

    assert spam[:3] == [ALLOW, ALLOW, REFUSE] and set(spam[3:]) == {SILENT}
    # Alice's refused requests were not counted against the channel.
    assert rate.check(GUILD, CHANNEL, BOB) == ALLOW


def test_one_update_per_counter_sent_side_by_side(dynamodb: Any, window_start: ManualClock) -> None:
    client = CountingClient(dynamodb)
    rate = limiter(client, window_start, person=1)

    assert rate.check(GUILD, CHANNEL, ALICE) == ALLOW
    assert client.calls == ["UpdateItem", "UpdateItem"]  # in parallel: one round trip
    client.calls.clear()
    assert rate.check(GUILD, CHANNEL, ALICE) == REFUSE
    assert client.calls == ["UpdateItem"] * 3  # and the channel's count taken back


def test_counters_are_keyed_by_keys_py_and_expire_a_window_later(
    dynamodb: Any, window_start: ManualClock
) -> None:
    rate = limiter(dynamodb, window_start)
    rate.check(GUILD, CHANNEL, ALICE)

    window = window_start.now_ms() // (WINDOW_S * 1000)
    items = {item["sk"]["S"]: item for item in scan_all(dynamodb)}
    person = items[keys.person_rate_sk(ALICE, window)]
    channel = items[keys.channel_rate_sk(CHANNEL, window)]
    for item in (person, channel):
        assert item["pk"]["S"] == keys.rate_pk(GUILD)
        assert item["hits"]["N"] == "1"
        # The window's end plus one more window, in epoch seconds.
        assert int(item["expires_at"]["N"]) == (window + 2) * WINDOW_S
        assert int(item["expires_at"]["N"]) > window_start.now_ms() // 1000 + WINDOW_S
    # The person's counter names them, so an erasure finds it; the channel's names nobody.
    assert person["user_id"]["S"] == ALICE
    assert "user_id" not in channel


def test_erasure_deletes_the_persons_counters(
    dynamodb: Any, window_start: ManualClock, services: MemoryServices, settings: Settings
) -> None:
    rate = AnswerRateLimiter(MemoryRepository(dynamodb, TABLE), settings, window_start)
    rate.check(GUILD, CHANNEL, ALICE)
    rate.check("dm", OTHER_CHANNEL, ALICE)
    assert services.repository.user_items_page(ALICE, 10)[0]

    Eraser(services.repository, services.clock, services.opt_outs.hash_of).erase(ALICE)

    left = [item for item in scan_all(dynamodb) if item.get("user_id", {}).get("S") == ALICE]
    assert left == []
    assert not any(ALICE in item["sk"]["S"] for item in scan_all(dynamodb))

"""The dates a query names (recall.dates), and recall moving up what was said on them."""

from __future__ import annotations

import pytest

from botmemory.recall.dates import DateMention, date_mentions, said_on
from botmemory.services import MemoryServices
from tests.botmemory.recall.test_search_leg import BOB, ask, consolidated, said
from tests.conftest import START_MS  # 2026-01-01T00:00:00Z

DAY_MS = 86_400_000
HOUR_MS = 3_600_000


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("What did Tim say on 16 November, 2023?", [DateMention(2023, 11, 16)]),
        ("what did he finish on 8th December, 2023", [DateMention(2023, 12, 8)]),
        ("the picture shared on December 1,2023", [DateMention(2023, 12, 1)]),
        ("on Nov. 16th", [DateMention(None, 11, 16)]),
        ("the 3rd of march", [DateMention(None, 3, 3)]),
        ("ISO: 2023-11-16 at noon", [DateMention(2023, 11, 16)]),
        ("When did Melanie go camping in June?", [DateMention(None, 6, None)]),
        ("the workout class of December 2023", [DateMention(2023, 12, None)]),
        ("How often did she go to the beach in 2023?", [DateMention(2023, None, None)]),
        ("2023年11月16日に何を話した？", [DateMention(2023, 11, 16)]),
        ("１１月１６日", [DateMention(None, 11, 16)]),  # full-width digits
        ("2023년 11월 16일에 뭐라고 했어?", [DateMention(2023, 11, 16)]),
        (
            "Where was John between August 11 and August 15 2023?",
            [DateMention(None, 8, 11), DateMention(2023, 8, 15)],
        ),
        ("31 February", [DateMention(None, 2, None)]),  # no such day: only the month
        ("on 1\u200b6 Novem\u200dber", [DateMention(None, 11, 16)]),  # zero-width inside words
    ],
)
def test_a_query_names_days_months_and_years_in_the_ways_people_write_them(
    query: str, named: list[DateMention]
) -> None:
    assert date_mentions(query) == named


@pytest.mark.parametrize(
    "query",
    [
        "May I ask what Tim painted?",  # the verb
        "we march in march",  # lower-case: not a month on its own
        "the 2000s were loud",
        "call 555-2023-1",
        "version 1.2023",
        "12:2023",
        "",
        "😀😀😀",
        "!!!???",
        "2023 2022 2021 2020 2019 2018 2017 2016 2015",  # a list of years is not a date asked
        "12月" * 1_333,  # a query-long run of months
        "東京" * 5_000,  # 10,000 CJK characters without a space
    ],
)
def test_what_only_looks_like_a_date_names_none(query: str) -> None:
    assert date_mentions(query) == []


def test_a_named_day_covers_that_day_in_every_time_zone_and_no_other() -> None:
    new_year = DateMention(2026, 1, 1)
    # 2026-01-01 runs from 00:00 at UTC+14 (10:00 UTC the day before) to 24:00 at UTC-12
    # (12:00 UTC the day after).
    assert new_year.covers(START_MS - 14 * HOUR_MS)
    assert new_year.covers(START_MS + DAY_MS + 12 * HOUR_MS - 1)
    assert not new_year.covers(START_MS - 14 * HOUR_MS - 1)
    assert not new_year.covers(START_MS + DAY_MS + 12 * HOUR_MS)
    assert said_on(START_MS, [DateMention(None, 1, None)])  # January of any year
    assert not said_on(START_MS + 12 * HOUR_MS, [DateMention(2025, None, None)])
    assert not said_on(START_MS, [])


def test_what_was_said_on_the_day_a_query_names_comes_first(searching: MemoryServices) -> None:
    # Noon UTC, three days running: each message is on one date in every time zone.
    noon = START_MS + 12 * HOUR_MS
    consolidated(
        searching,
        [
            said(BOB, "Finished a painting of the harbour at dusk, oils this time.", noon),
            said(
                BOB,
                "Another painting done at last: the old mill by the river, in watercolour.",
                noon + DAY_MS,
            ),
            said(
                BOB,
                "Started a painting of the lighthouse in the fog, charcoal first.",
                noon + 2 * DAY_MS,
            ),
        ],
    )

    dated = ask(searching, "What painting did Bob share on 2 January 2026?")
    undated = ask(searching, "What painting did Bob share?")

    assert "old mill" in dated["passages"][0]["text"]
    assert "old mill" not in undated["passages"][0]["text"]  # the date's doing, not the words'
    # Nothing is filtered out: the same messages, in another order.
    assert sorted(p["text"] for p in dated["passages"]) == sorted(
        p["text"] for p in undated["passages"]
    )


def test_a_named_time_is_searched_as_spans_wide_enough_for_every_time_zone() -> None:
    from botmemory.recall.dates import spans_of

    now = START_MS + 200 * DAY_MS  # in 2026
    assert spans_of(date_mentions("on 2 January 2026"), now) == [
        (START_MS + DAY_MS - 14 * HOUR_MS, START_MS + 2 * DAY_MS + 12 * HOUR_MS)
    ]
    # No year: this year's January and last year's.
    january = [(START_MS - 14 * HOUR_MS, START_MS + 31 * DAY_MS + 12 * HOUR_MS)]
    last_january = [
        (START_MS - 365 * DAY_MS - 14 * HOUR_MS, START_MS - 334 * DAY_MS + 12 * HOUR_MS)
    ]
    assert spans_of(date_mentions("what did we do in January?"), now) == january + last_january
    assert spans_of(date_mentions("29 February"), now) == []  # neither 2026 nor 2025 has one
    assert spans_of(date_mentions("what painting?"), now) == []


def test_recall_asks_search_for_the_times_its_query_names(searching: MemoryServices) -> None:
    from botmemory.recall.search_leg import SearchLeg
    from tests.botmemory.recall.test_search_leg import CHANNEL, GUILD

    assert searching.search_index is not None
    leg = SearchLeg(searching.search_index, searching.repository, searching.settings)

    dated = leg.query_for(GUILD, CHANNEL, "What did Bob paint on 2 January 2026?", START_MS)
    undated = leg.query_for(GUILD, CHANNEL, "What did Bob paint?", START_MS)

    assert dated.during == [
        (START_MS + DAY_MS - 14 * HOUR_MS, START_MS + 2 * DAY_MS + 12 * HOUR_MS)
    ]
    assert undated.during == []


def test_a_question_asking_when_is_told_from_one_placing_things_in_time() -> None:
    from botmemory.recall.dates import asks_when, tells_when

    assert all(
        asks_when(q)
        for q in (
            "When did Melanie go camping?",
            "how long ago did he move?",
            "¿Cuándo se mudó?",
            "Wann ist sie umgezogen?",
            "彼はいつ引っ越した？",
            "他什么时候搬家的？",
            "언제 이사했어?",
        )
    )
    assert not any(asks_when(q) for q in ("What did Tim paint?", "", "whenever you like"))
    assert all(
        tells_when(t)
        for t in (
            "We went camping last week",
            "I moved two years ago",
            "yesterday was fun",
            "see you next Friday",
            "back in May",
            "on 2023-11-16",
        )
    )
    assert not any(tells_when(t) for t in ("I may go", "we march on", "I love painting"))


def test_what_says_when_comes_first_for_a_question_asking_when(
    searching: MemoryServices,
) -> None:
    noon = START_MS + 12 * HOUR_MS
    consolidated(
        searching,
        [
            said(BOB, "Lisbon was lovely, the trams and the custard tarts were the best.", noon),
            said(BOB, "I came to Lisbon last spring, after the job offer came through.", noon + 1),
            said(BOB, "Lisbon traffic is terrible, though, and the hills are steep.", noon + 2),
        ],
    )

    asked = ask(searching, "When did Bob move to Lisbon?")
    unasked = ask(searching, "Did Bob like Lisbon?")

    assert "last spring" in asked["passages"][0]["text"]
    assert "last spring" not in unasked["passages"][0]["text"]

"""What the bench measures on the read side: recall (3a, 3b, and the footnotes), recall with
a query (3c), the largest block (3d), a persona (3e), answering a mention (7)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from meter import Request, describe, longest_chain, operations, read_units, serialized_moto
from tables import compared, print_table, ratio
from world import (
    EARLY_MESSAGE,
    EARLY_TEXT,
    INDEX_BATCH,
    MESSAGE_WORDS,
    PERSONA,
    QUERY,
    SEARCH_TIMEOUT_MS,
    SPEAKERS,
    VOCABULARY,
    Lab,
    SilentPoster,
    TimedChatModel,
    World,
    full_world,
    indexed_world,
    persona_world,
    recall_world,
)

from botmemory.answering.answerer import Answerer
from botmemory.answering.prompt import system_prompt_source
from botmemory.answering.rate import AnswerRateLimiter
from botmemory.answering.requests import question_of
from botmemory.answering.triggers import answer_trigger
from botmemory.recall.block import (
    ELSEWHERE_HEADING,
    EPISODE_HEADING,
    FACT_HEADING,
    PASSAGE_HEADING,
    PIN_HEADING,
    SUMMARY_HEADING,
)
from botmemory.recall.contract import RecallRequest
from botmemory.recall.recaller import FACT_WINDOW_FACTOR
from botmemory.recall.search_leg import SearchLeg, SearchStatus, search_depth
from botmemory.settings.config import Settings
from localrun import gateway as gw

# Each request is held this long while recall is measured, so that reads issued side by side
# overlap. It must be long against the process's own work: moto serializes its handling, and
# a recall's Python runs under one GIL, so a wave's last read can start 100 ms or more after
# its first has ended on a busy machine, and the chain then reads a round trip too many
# (table 3d, the full block, read 4 in 4 of 40 runs at 20 ms, in 3 of 390 at 100 ms, and in
# none of 100 at 250 ms, most of them beside a LoCoMo replay on the other core).
SIMULATED_LATENCY_S = 0.25


SEARCH_TIMINGS = 5  # in-process searches timed (the median is shown)


# 3. Recall -----------------------------------------------------------------------------


@dataclass
class RecallFigures:
    requests: int
    round_trips: int
    read_units: float
    block_chars: int
    operations: str
    chain: str
    search: SearchStatus
    passages: int  # passages the block shows
    shown_hits: set[str]  # the messages they show as hits (sort keys)
    slowest_ms: float  # the slowest request, simulated latency included
    batch_read_units: float  # those of its BatchGetItem (search's read-back of its hits)


def measure_recall(
    lab: Lab,
    world: World,
    participants: list[str] | None,
    query: str | None = None,
    persona_id: str | None = None,
) -> RecallFigures:
    request = RecallRequest(
        guild_id=gw.GUILD,
        channel_id=gw.CHANNEL,
        user_id=gw.ALICE,
        participants=participants,
        query=query,
        persona_id=persona_id,
    )
    recaller = world.services.recaller
    recaller.recall(request)  # warm-up: the recall thread pool starts its threads
    lab.meter.take()
    with serialized_moto(), lab.meter.simulated_latency(SIMULATED_LATENCY_S):
        result = recaller.recall(request)
    requests = lab.meter.take()
    chain = longest_chain(requests)
    return RecallFigures(
        requests=len(requests),
        round_trips=len(chain),
        read_units=sum(read_units(r) for r in requests),
        block_chars=len(result.memory),
        operations=operations(requests),
        chain=" -> ".join(describe(r) for r in chain),
        search=result.search,
        passages=len(result.passages),
        shown_hits={p.provenance[-1] for p in result.passages if p.provenance},
        slowest_ms=max(((r.ended - r.started) * 1000 for r in requests), default=0.0),
        batch_read_units=sum(read_units(r) for r in requests if r.operation == "BatchGetItem"),
    )


def recall_rows(left: RecallFigures, right: RecallFigures) -> list[tuple[object, ...]]:
    return compared(
        [
            ("DynamoDB requests", left.requests, right.requests),
            ("sequential round trips", left.round_trips, right.round_trips),
            ("estimated read units", left.read_units, right.read_units),
            ("memory block characters", left.block_chars, right.block_chars),
        ]
    )


def bench_recall(lab: Lab) -> None:
    facts_a = 20
    young = measure_recall(lab, recall_world(lab, 100, facts_a), None)
    old = measure_recall(lab, recall_world(lab, 10_000, facts_a), None)
    print_table(
        "3a. Recall, participants derived from the channel: 100 vs 10,000 observations",
        ["figure", "100 obs", "10,000 obs", "ratio"],
        recall_rows(young, old),
        [
            f"requests: {young.operations} (100 obs); {old.operations} (10,000 obs).",
            f"longest chain: {old.chain}.",
            f"Each channel: 3 speakers with {facts_a} active facts each, 3 pins, 10 episodes.",
        ],
    )

    few = measure_recall(lab, recall_world(lab, 100, 10), SPEAKERS)
    many = measure_recall(lab, recall_world(lab, 100, 1_000), SPEAKERS)
    shown = Settings().recall_facts_per_person
    window = shown * FACT_WINDOW_FACTOR
    print_table(
        "3b. Recall, 3 participants given explicitly: 10 vs 1,000 active facts per user",
        ["figure", "10 facts", "1,000 facts", "ratio"],
        recall_rows(few, many),
        [
            f"requests: {few.operations} (10 facts); {many.operations} (1,000 facts).",
            f"longest chain: {many.chain}.",
            f"Recall reads at most {window} facts per person ({shown} shown x window factor"
            f" {FACT_WINDOW_FACTOR}), the newest;",
            "then ranks them by hits and recency. More facts beyond that window cost nothing.",
            "Each channel: 100 observations, 3 pins, 10 episodes.",
        ],
    )
    bench_recall_query(lab)
    bench_full_block(lab)
    bench_persona(lab)
    print("Footnotes")
    print("=========")
    print(
        f"  Round trips: each request is held {SIMULATED_LATENCY_S * 1000:.0f} ms (simulated network)"
        " so the reads Recaller\n  issues side by side on its thread pool really overlap; the figure"
        " is the longest chain of\n  requests each started after the previous one ended: what the"
        " caller waits for in sequence."
    )
    print(
        "  Read units are an ESTIMATE: an item's size is taken as the sum of the UTF-8 lengths of"
        "\n  its attribute names and values as returned; per Query/Scan the total is rounded up to"
        "\n  4 KB units (at least one), per GetItem/BatchGetItem each item is rounded up on its own;"
        "\n  x0.5 for eventually consistent reads (every recall read is; GSI queries always are)."
        "\n  DynamoDB charges the full item even when a projection returns part of it."
    )
    print()


# 3c. Recall with a query: search over the whole history ---------------------------------


@dataclass
class QueryFigures:
    recall: RecallFigures
    early_found: str  # whether the block shows the early message
    hits: int  # what the index returned for the query (at most search_depth(settings))
    search_ms: float  # the in-process index search alone, median of SEARCH_TIMINGS
    seeding_s: tuple[float, float]  # seconds to fill the table, then the index
    matching: int  # passages that share a token with the query


def timed_search(world: World) -> tuple[float, int]:
    """The median milliseconds of the index search recall runs for QUERY, and its hits."""
    services = world.services
    leg = SearchLeg(world.index, services.repository, services.settings)
    query = leg.query_for(gw.GUILD, gw.CHANNEL, QUERY, world.clock.now_ms())
    timings, hits = [], 0
    for _ in range(SEARCH_TIMINGS):
        started = time.perf_counter()
        hits = len(world.index.search(query))
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings), hits


def measure_query(lab: Lab, observations: int) -> QueryFigures:
    world, early, seeding, matching = indexed_world(lab, observations)
    search_ms, hits = timed_search(world)
    recall = measure_recall(lab, world, None, QUERY)
    return QueryFigures(recall, _shown(early, recall), hits, search_ms, seeding, matching)


def _shown(sk: str, recall: RecallFigures) -> str:
    return "yes, a hit" if sk in recall.shown_hits else "no"


SATURATED_HISTORY = 1_000


def bench_recall_query(lab: Lab) -> None:
    small, large = 100, 100_000
    young = measure_query(lab, small)
    old = measure_query(lab, large)
    # A history where search already returns its full depth: beyond it, the two ends differ
    # by the hits search returns, not by the length of the history.
    saturated = measure_query(lab, SATURATED_HISTORY)
    a, b = young.recall, old.recall
    rows = recall_rows(a, b)
    rows[3:3] = compared(
        [("  of which the search's read-back", a.batch_read_units, b.batch_read_units)]
    )
    rows += [
        ("search status (RecallResult.search)", a.search.value, b.search.value, ""),
        ("passages sharing a word with the query", young.matching, old.matching, ""),
        ("index hits checked against the table", young.hits, old.hits, ratio(young.hits, old.hits)),
        ("passages shown", a.passages, b.passages, ""),
        ("the early message found", young.early_found, old.early_found, ""),
        (
            f"in-process index search, ms (median of {SEARCH_TIMINGS})",
            young.search_ms,
            old.search_ms,
            ratio(young.search_ms, old.search_ms),
        ),
    ]
    table_s, index_s = old.seeding_s
    print_table(
        "3c. Recall with a query: 100 vs 100,000 observations in the channel",
        ["figure", "100 obs", "100,000 obs", "ratio"],
        rows,
        [
            f'query: "{QUERY}"',
            f"the early message, #{EARLY_MESSAGE} of each history:",
            f'  "{EARLY_TEXT}"',
            f"requests: {a.operations} (100 obs); {b.operations} (100,000 obs).",
            f"At {SATURATED_HISTORY:,} obs, where {saturated.matching} passages share a word with"
            f" the query and search already returns {saturated.hits} hits:"
            f" {saturated.recall.requests} requests,",
            f"{saturated.recall.round_trips} round trips ({saturated.recall.chain}),"
            f" {saturated.recall.read_units:.2f} read units. Past that depth",
            "the history's length adds nothing: read units then vary with the hits (how many",
            "carry the message before them, how many neighbours share one), within the bound below.",
            f"longest chain: {b.chain}.",
            "The search's read-back is strongly consistent BatchGetItem (100 keys each) of its hits' sources",
            f"(a message and the one before it, and their delete marks): at most"
            f" {search_depth(Settings())} hits with the default budgets, so at most"
            f" {4 * search_depth(Settings())} keys",
            "however long the history; fewer where hits are neighbours and share a message, as",
            "among 100.",
            "The index search runs in process (SQLite FTS5) before that BatchGetItem: it is no",
            "DynamoDB round trip and is in none of the figures above but the last row. FTS5 ranks",
            "every passage that shares a word with the query, so its time grows with them.",
            f"Each channel: the world of 3a, its messages {MESSAGE_WORDS[0]} to {MESSAGE_WORDS[1]}"
            f" words drawn from a {len(VOCABULARY)}-word",
            "vocabulary (the query's 'bread' and 'Sunday' among them), each indexed as a passage.",
            f"Seeding 100,000 observations: {table_s:.1f} s into the table, then {index_s:.1f} s"
            " to build and",
            f"index their passages ({INDEX_BATCH:,} per add).",
            f"MEMORY_SEARCH_TIMEOUT_MS is {SEARCH_TIMEOUT_MS:,} here (default"
            f" {Settings().search_timeout_ms}). The recall's slowest request took",
            f"{b.slowest_ms:,.0f} ms at 100,000 obs ({a.slowest_ms:,.0f} ms at 100), waiting on"
            " the serialized moto, which sorts",
            "the whole partition in Python for each Query (DynamoDB seeks the key range): the",
            "default budget would cut the search off there.",
        ],
    )


# 3d. The largest block: every section full -------------------------------------------

# DiscoClaw's published worst case for its assembled memory context, in characters.
DISCOCLAW_WORST_CASE_CHARS = 8_600


def bench_full_block(lab: Lab) -> None:
    world, people = full_world(lab)
    figures = measure_recall(lab, world, people, QUERY)
    result = world.services.recaller.recall(
        RecallRequest(
            guild_id=gw.GUILD,
            channel_id=gw.CHANNEL,
            user_id=gw.ALICE,
            participants=people,
            query=QUERY,
        )
    )
    settings = world.services.settings
    sections = {block.split("\n", 1)[0]: len(block) for block in result.memory.split("\n\n")}
    budgeted = [
        (PIN_HEADING, settings.recall_pin_chars),
        (SUMMARY_HEADING, settings.recall_summary_chars),
        (FACT_HEADING, settings.recall_fact_chars),
        (ELSEWHERE_HEADING, settings.recall_short_term_chars),
        (PASSAGE_HEADING, settings.recall_search_chars),
        (EPISODE_HEADING, settings.recall_episode_chars),
    ]
    rows: list[tuple[object, ...]] = [
        (f"  {heading}", sections.get(heading, 0), budget) for heading, budget in budgeted
    ]
    header_footer = len(result.memory) - sum(sections.get(h, 0) for h, _ in budgeted)
    budgets = sum(budget for _, budget in budgeted)
    bound = budgets + header_footer
    rows += [
        ("  header, footer and blank lines", header_footer, ""),
        ("whole memory block", len(result.memory), f"{budgets:,} + header"),
        ("its bound: every budget spent, and the header", bound, ""),
        ("DiscoClaw's published worst case", DISCOCLAW_WORST_CASE_CHARS, ""),
        ("DiscoClaw's worst case / this bound", ratio(bound, DISCOCLAW_WORST_CASE_CHARS), ""),
        ("DynamoDB requests", figures.requests, ""),
        ("sequential round trips", figures.round_trips, "at most 3"),
        ("estimated read units", figures.read_units, ""),
    ]
    print_table(
        "3d. The largest memory block: every section over its budget (default budgets)",
        ["figure", "characters or count", "budget"],
        rows,
        [
            f"{len(people)} participants (MEMORY_RECALL_MAX_PARTICIPANTS) with 20 facts each and"
            " short-term entries in 3 other",
            "public channels; 8 long pins; a channel summary at its 2,000-character cap; 500"
            " indexed messages the",
            "query matches; the episode cap. The passages also take the room facts and episodes"
            " leave unused, so",
            "the block never exceeds the sum of the budgets plus its header.",
            f"requests: {figures.operations}.",
            f"longest chain: {figures.chain}.",
        ],
    )


# 3e. Recall with a persona ----------------------------------------------------------------


def bench_persona(lab: Lab) -> None:
    world = persona_world(lab)
    without = measure_recall(lab, world, SPEAKERS)
    with_persona = measure_recall(lab, world, SPEAKERS, persona_id=PERSONA.persona_id)
    print_table(
        "3e. Recall, 3 participants given explicitly: without and with a persona",
        ["figure", "no persona", "persona", "ratio"],
        recall_rows(without, with_persona),
        [
            f"requests: {without.operations} (no persona); {with_persona.operations} (persona).",
            f"longest chain with the persona: {with_persona.chain}.",
            "The persona is read beside the first wave (one Query of the server's personas); what",
            "it knows of each participant and its own knowledge are read beside their own facts.",
            "Each speaker: 20 facts of their own, 20 the persona keeps about them; 20 of its own.",
        ],
    )


# 7. Answering a mention ------------------------------------------------------------------


def bench_answer(lab: Lab) -> None:
    """From the ingest of a mention to the chat model's request, in a channel with history."""
    world = recall_world(lab, 2_000, 40)
    services, clock = world.services, world.clock
    model = TimedChatModel()
    answerer = Answerer(
        services,
        model,
        SilentPoster(),
        AnswerRateLimiter(services.repository, services.settings, clock),
        system_prompt_source(services.settings),
    )
    at_ms = clock.now_ms() + 60_000
    event = gw.message(gw.ALICE, f"<@{gw.BOT}> where do I like hiking?", at_ms)
    event["d"]["mentions"] = [gw.user(gw.BOT, bot=True)]

    def one(event: dict[str, Any]) -> tuple[float, list[Request]]:
        lab.meter.take()
        with serialized_moto(), lab.meter.simulated_latency(SIMULATED_LATENCY_S):
            started = time.perf_counter()
            services.recorder.record([event])  # IngestFunction's write
            trigger = answer_trigger(event, gw.BOT)
            assert trigger is not None
            question, reply = question_of({"answer": trigger.model_dump(mode="json")})
            answerer.answer(question, reply)
        before_model = [r for r in lab.meter.take() if r.started <= model.asked_at]
        return (model.asked_at - started) * 1000, before_model

    one(event)  # warm-up: thread pools, the rules of pydantic
    second = gw.message(gw.ALICE, f"<@{gw.BOT}> and what do I do for work?", at_ms + 1000)
    second["d"]["mentions"] = event["d"]["mentions"]
    elapsed_ms, requests = one(second)
    chain = longest_chain(requests)
    request = model.request
    assert request is not None
    settings = services.settings
    budgets = {
        "pins": settings.recall_pin_chars,
        "channel summary": settings.recall_summary_chars,
        "facts": settings.recall_fact_chars,
        "other channels": settings.recall_short_term_chars,
        "episodes": settings.recall_episode_chars,
        "passages": settings.recall_search_chars,
        "history": settings.answer_history_chars,
    }
    print_table(
        "7. Answering a mention: from its ingest to the chat model's request",
        ["figure", "value"],
        [
            (
                f"time, ms (model excluded; {SIMULATED_LATENCY_S * 1000:.0f} ms per DynamoDB"
                " request)",
                f"{elapsed_ms:.0f}",
            ),
            ("DynamoDB requests", len(requests)),
            ("sequential round trips (target: at most 4)", len(chain)),
            ("system prompt, characters", len(request.system)),
            ("the parts' budgets together, characters", sum(budgets.values())),
            ("user turn, characters", len(request.turns[-1].content)),
        ],
        [
            f"requests: {operations(requests)}.",
            f"longest chain: {' -> '.join(describe(r) for r in chain)}.",
            "The chain: the mention's PutItem (ingest); the rate limit's two counters, the",
            "channel's persona, the guild's staff record and the mention's stored roles side by",
            "side; recall's first wave (the channel summary among",
            "it), the channel's history and the speaker's facts side by side; then the facts",
            "and short-term entries of the people recall found. The search runs in process",
            "here (SQLite FTS5); its read-back is one more BatchGetItem when it finds something.",
            f"Budgets: {', '.join(f'{k} {v:,}' for k, v in budgets.items())};",
            f"the person note adds at most {settings.answer_person_facts} facts; the template is"
            " the default prompt.",
        ],
    )

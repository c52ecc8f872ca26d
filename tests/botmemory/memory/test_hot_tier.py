"""The hot tier stays lean (botmemory.memory.hot_tier): answers count the recall hits of the facts
they showed, after posting, while recall writes nothing; consolidation demotes a speaker's
least recalled facts beyond the targets, evicts the least recalled demoted ones beyond the
cap, and never touches what the person asked to be remembered; staff restore a demoted
fact; a forget or an erasure meanwhile wins."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from botocore.exceptions import ClientError

from botmemory.answering.answerer import Answerer, AnswerReport, AnswerStatus
from botmemory.answering.chat.rules import RulesChatModel
from botmemory.answering.prompt import DEFAULT_SYSTEM_PROMPT
from botmemory.answering.question import Question
from botmemory.answering.rate import AnswerRateLimiter
from botmemory.clock import DAY_MS, ManualClock
from botmemory.commands.listing import user_facts_listing
from botmemory.commands.router import Commands
from botmemory.consolidation.outcome import Outcome, Status, outcome_metrics
from botmemory.discord.interactions import Permissions
from botmemory.recall.contract import (
    RecallRequest,
)
from botmemory.records import (
    Fact,
    FactChange,
    FactSource,
    FactStatus,
    HistoryActor,
)
from botmemory.runtime import build_services
from botmemory.search.passages import fact_passage
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from localrun import gateway as gw
from localrun.storage import put_facts
from scripts.make_events import command
from tests.conftest import START_MS, TABLE, WRITE_OPERATIONS, RequestCounter
from tests.support.facts import a_fact
from tests.support.lambda_local import ROOT

STAFF = str(Permissions.MANAGE_GUILD.value)
_ids = iter(range(1_650_000_000_000_000_000, 1_700_000_000_000_000_000))


def services_with(dynamodb: Any, clock: ManualClock, **overrides: Any) -> MemoryServices:
    settings = Settings(table_name=TABLE, memory_model="rules", bot_user_id=gw.BOT, **overrides)
    return build_services(settings, dynamodb=dynamodb, clock=clock)


def seed(
    services: MemoryServices,
    user: str,
    text: str,
    *,
    hits: int = 0,
    last_hit_days_ago: float | None = None,
    updated_days_ago: float = 1,
    source: FactSource = FactSource.SELF,
    status: FactStatus = FactStatus.ACTIVE,
) -> Fact:
    now = services.clock.now_ms()
    updated = now - int(updated_days_ago * DAY_MS)
    fact = a_fact(
        user,
        text,
        at_ms=updated,
        source=source,
        status=status,
        recall_hits=hits,
        last_recall_ms=None if last_hit_days_ago is None else now - int(last_hit_days_ago * DAY_MS),
    )
    put_facts(services.repository, [fact])
    return fact


def stored(services: MemoryServices, fact: Fact) -> Fact | None:
    return services.repository.fact(fact.scope, fact.user_id, fact.fact_id)


def status_of(services: MemoryServices, fact: Fact) -> FactStatus | None:
    found = stored(services, fact)
    return found.status if found else None


def round_with(services: MemoryServices, *speakers: str) -> Outcome:
    """One consolidation round in which these people speak (small talk: no new facts)."""
    clock = services.clock
    events = [
        gw.message(speaker, f"small talk number {n}", clock.now_ms() + n * 1000)
        for n, speaker in enumerate(speakers * 2)
    ]
    services.recorder.record(events)
    (outcome,) = services.consolidator.consolidate(gw.CHANNEL, force=True)
    assert outcome.status == Status.CONSOLIDATED
    return outcome


def run(
    services: MemoryServices,
    name: str,
    sub: str,
    options: dict[str, Any],
    *,
    user: str = gw.ALICE,
    permissions: str = "0",
) -> str:
    interaction = command(str(next(_ids)), name, sub, options, permissions, user)
    interaction["guild_id"] = gw.GUILD
    commands = Commands(services, defer=lambda job: None)
    return str(commands.handle(interaction)["data"]["content"])


# Recall hits: counted by the answer, after its reply; never by recall. -----------------


class RecordingPoster:
    """Discord's side of an answer, recording what happens in order with the table writes."""

    def __init__(self, order: list[str]) -> None:
        self.order = order
        self.posted: list[str] = []

    def trigger_typing(self, channel_id: str) -> None:
        pass

    def create_message(self, channel_id: str, content: str, **_: Any) -> dict[str, Any]:
        self.order.append("post")
        self.posted.append(content)
        return {"id": gw.snowflake(START_MS + 10_000), "content": content}

    def edit_original_response(
        self, application_id: str, token: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        return None


def answerer(services: MemoryServices, poster: RecordingPoster) -> Answerer:
    settings = services.settings
    limiter = AnswerRateLimiter(services.repository, settings, services.clock)
    return Answerer(services, RulesChatModel(), poster, limiter, lambda: DEFAULT_SYSTEM_PROMPT)


def question(text: str) -> Question:
    return Question(
        guild_id=gw.GUILD,
        channel_id=gw.CHANNEL,
        author_id=gw.ALICE,
        author_name="Alice",
        content=text,
        message_id=gw.snowflake(START_MS + 5_000),
    )


def hit_writes(order: list[str], dynamodb: Any) -> None:
    """Note each write that records recall hits, in `order`."""

    def noted(params: dict[str, Any], **_: Any) -> None:
        if "recall_hits" in str(params):
            order.append("hits")

    dynamodb.meta.events.register("provide-client-params.dynamodb.*", noted)


def test_recall_writes_nothing_and_the_answer_counts_the_facts_it_showed_after_posting(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = services_with(dynamodb, clock)
    hiking = seed(services, gw.ALICE, "Alice loves hiking in the Alps")
    nurse = seed(services, gw.ALICE, "Alice works as a nurse")
    tea = seed(services, gw.BOB, "Bob drinks green tea")  # not in the conversation
    counter = RequestCounter(dynamodb)
    request = RecallRequest(
        guild_id=gw.GUILD, channel_id=gw.CHANNEL, user_id=gw.ALICE, query="where do I hike?"
    )

    recalled = services.recaller.recall(request)

    assert {f.id for f in recalled.facts[gw.ALICE]} == {hiking.fact_id, nurse.fact_id}
    assert counter.count(*WRITE_OPERATIONS) == 0  # recall never writes
    assert [stored(services, f).recall_hits for f in (hiking, nurse)] == [0, 0]  # type: ignore[union-attr]

    order: list[str] = []
    hit_writes(order, dynamodb)
    poster = RecordingPoster(order)
    clock.advance(seconds=30)
    counter.reset()
    report = answerer(services, poster).answer(question("where do I like hiking?"))

    assert report.status == AnswerStatus.ANSWERED and poster.posted
    assert report.recall_hits == 2 and not report.recall_hits_failed
    assert order == ["post", "hits"]  # after the reply, never before it
    # One request for all the facts shown: one transaction of two updates.
    assert counter.count("TransactWriteItems") == 1 and order.count("hits") == 1
    for fact in (hiking, nurse):
        after = stored(services, fact)
        assert after is not None
        assert (after.recall_hits, after.last_recall_ms) == (1, clock.now_ms())
    assert stored(services, tea).recall_hits == 0  # type: ignore[union-attr]


def test_a_failure_to_count_hits_is_logged_and_counted_and_the_answer_stands(
    dynamodb: Any, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = services_with(dynamodb, clock)
    seed(services, gw.ALICE, "Alice loves hiking in the Alps")

    def throttled(*_: Any, **__: Any) -> int:
        error = {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}
        raise ClientError(error, "TransactWriteItems")  # type: ignore[arg-type]

    monkeypatch.setattr(services.repository, "record_recall_hits", throttled)
    poster = RecordingPoster([])

    report = answerer(services, poster).answer(question("where do I like hiking?"))

    assert report.status == AnswerStatus.ANSWERED and len(poster.posted) == 1
    assert report.recall_hits == 0 and report.recall_hits_failed
    # AnswerFunction counts it as a metric.
    path = ROOT / "functions" / "answer" / "app.py"
    spec = importlib.util.spec_from_file_location("_answer_app_for_hot_tier", path)
    assert spec is not None and spec.loader is not None
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    emitted: list[tuple[str, float]] = []
    monkeypatch.setattr(
        app.metrics, "add_metric", lambda name, unit, value: emitted.append((name, value))
    )
    app.record_metrics(report)
    assert ("RecallHitsFailed", 1) in emitted
    app.record_metrics(AnswerReport(AnswerStatus.ANSWERED, posted=1, recall_hits=3))
    assert ("RecallHitsRecorded", 3) in emitted


def test_a_fact_forgotten_before_its_hit_is_counted_stays_gone_and_the_others_count(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = services_with(dynamodb, clock)
    kept = seed(services, gw.ALICE, "Alice loves hiking in the Alps")
    forgotten = seed(services, gw.ALICE, "Alice works as a nurse")
    run(services, "memory", "forget", {"what": forgotten.fact_id})

    counted = services.repository.record_recall_hits(
        [(f.scope, f.user_id, f.fact_id) for f in (kept, forgotten)], clock.now_ms()
    )

    assert counted == 1
    assert stored(services, forgotten) is None  # no stub written back
    assert stored(services, kept).recall_hits == 1  # type: ignore[union-attr]


# Demotion at consolidation --------------------------------------------------------------


def test_the_least_recalled_facts_are_demoted_never_recalled_first_then_fewest_hits_then_oldest_hit(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = services_with(dynamodb, clock, consolidate_every=2, hot_facts_per_person=3)
    # Never recalled comes first even before the oldest update of all (`one_old_hit`).
    never_old = seed(services, gw.ALICE, "Alice fact never recalled old", updated_days_ago=9)
    never_new = seed(services, gw.ALICE, "Alice fact never recalled new", updated_days_ago=2)
    one_old_hit = seed(
        services,
        gw.ALICE,
        "Alice fact one old hit",
        hits=1,
        last_hit_days_ago=5,
        updated_days_ago=30,
    )
    one_new_hit = seed(
        services,
        gw.ALICE,
        "Alice fact one new hit",
        hits=1,
        last_hit_days_ago=1,
        updated_days_ago=30,
    )
    # More hits beat a newer last hit.
    many_old_hits = seed(
        services, gw.ALICE, "Alice fact many old hits", hits=4, last_hit_days_ago=20
    )
    most_hits = seed(services, gw.ALICE, "Alice fact most hits", hits=9, last_hit_days_ago=1)
    bobs = [seed(services, gw.BOB, f"Bob fact {n}") for n in range(5)]  # Bob does not speak

    outcome = round_with(services, gw.ALICE)

    demoted = [never_old, never_new, one_old_hit]
    assert [status_of(services, f) for f in demoted] == [FactStatus.DEMOTED] * 3
    kept = [one_new_hit, many_old_hits, most_hits]
    assert [status_of(services, f) for f in kept] == [FactStatus.ACTIVE] * 3
    assert [status_of(services, f) for f in bobs] == [FactStatus.ACTIVE] * 5
    assert (outcome.demoted, outcome.evicted) == (3, 0)
    assert ("FactsDemoted", 3) in outcome_metrics([outcome])
    # Out of recall's index, each with its history entry.
    active = services.repository.active_facts(gw.GUILD, gw.ALICE, 50)
    assert {f.fact_id for f in active} == {f.fact_id for f in kept}
    (entry,) = services.repository.history_of(gw.GUILD, never_old.fact_id)
    assert (entry.change, entry.actor, entry.old) == (
        FactChange.DEMOTED,
        HistoryActor.CONSOLIDATION,
        never_old.text,
    )


def test_a_fact_learned_in_the_round_waits_for_a_later_round(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = services_with(dynamodb, clock, consolidate_every=2, hot_facts_per_person=2)
    recalled = [
        seed(services, gw.ALICE, f"Alice fact recalled {n}", hits=3, last_hit_days_ago=1)
        for n in range(2)
    ]
    services.recorder.record(
        [
            gw.message(gw.ALICE, "I love sailing on the lake", clock.now_ms()),
            gw.message(gw.ALICE, "small talk again", clock.now_ms() + 1000),
        ]
    )

    (learning,) = services.consolidator.consolidate(gw.CHANNEL, force=True)
    learned = [
        f
        for f in services.repository.all_facts(gw.GUILD, gw.ALICE)
        if f.fact_id not in {r.fact_id for r in recalled}
    ]
    clock.advance(seconds=60)
    later = round_with(services, gw.ALICE)

    # Three active facts over a target of two: the new one is spared in its own round ...
    assert learning.facts_written == 1 and learning.demoted == 0
    assert [f.status for f in learned] == [FactStatus.ACTIVE]
    # ... and, never recalled since, is the first to go in the next.
    assert later.demoted == 1 and status_of(services, learned[0]) == FactStatus.DEMOTED
    assert [status_of(services, f) for f in recalled] == [FactStatus.ACTIVE] * 2


def test_the_character_target_alone_demotes(dynamodb: Any, clock: ManualClock) -> None:
    services = services_with(dynamodb, clock, consolidate_every=2, hot_fact_chars=100)
    long = "x" * 20
    facts = [
        seed(services, gw.ALICE, f"Alice fact recalled {long}", hits=2, last_hit_days_ago=1),
        seed(services, gw.ALICE, f"Alice fact recalled too {long}", hits=1, last_hit_days_ago=1),
        seed(services, gw.ALICE, f"Alice fact never recalled {long}"),
    ]
    assert sum(len(f.text) for f in facts) > 100 and len(facts) < 25  # over chars only

    outcome = round_with(services, gw.ALICE)

    assert outcome.demoted == 1
    assert [status_of(services, f) for f in facts] == [
        FactStatus.ACTIVE,
        FactStatus.ACTIVE,
        FactStatus.DEMOTED,
    ]


def test_remembered_facts_are_never_demoted_nor_evicted_even_alone_over_the_targets(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = services_with(
        dynamodb,
        clock,
        consolidate_every=2,
        hot_facts_per_person=1,
        hot_fact_chars=100,
        facts_max_per_person=2,
    )
    remembered = [
        seed(services, gw.ALICE, f"I asked you to remember number {n} " + "y" * 40, source=source)
        for n, source in enumerate([FactSource.MANUAL] * 3)
    ]
    heard = seed(services, gw.ALICE, "Alice fact heard in conversation", hits=5)
    demoted = seed(services, gw.ALICE, "Alice fact demoted before", status=FactStatus.DEMOTED)

    outcome = round_with(services, gw.ALICE)

    # Remembered ones alone exceed every target and the cap, and stay active.
    assert [status_of(services, f) for f in remembered] == [FactStatus.ACTIVE] * 3
    # The others made room: demoted, and past the cap of 2 stored, evicted.
    assert stored(services, heard) is None and stored(services, demoted) is None
    assert outcome.evicted == 2


def test_demoted_facts_are_kept_out_of_the_recall_block_and_search_but_listed_in_memory_show(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = services_with(
        dynamodb,
        clock,
        consolidate_every=2,
        hot_facts_per_person=1,
        search_index="sqlite::memory:",
    )
    kayak = seed(services, gw.ALICE, "Alice paddles a kayak on weekends")
    chess = seed(services, gw.ALICE, "Alice plays chess online", hits=3, last_hit_days_ago=1)
    assert services.search_index is not None
    passage = fact_passage(kayak, "Alice")
    assert passage is not None
    services.search_index.add([passage])  # indexed while it was active
    asked = RecallRequest(
        guild_id=gw.GUILD, channel_id=gw.CHANNEL, user_id=gw.ALICE, query="kayak weekends"
    )
    assert "kayak" in services.recaller.recall(asked).memory

    round_with(services, gw.ALICE)

    assert status_of(services, kayak) == FactStatus.DEMOTED
    recalled = services.recaller.recall(asked)
    assert "kayak" not in recalled.memory and "chess" in recalled.memory
    assert {f.id for fs in recalled.facts.values() for f in fs} == {chess.fact_id}
    shown = run(services, "memory", "show", {})
    assert f"`{kayak.fact_id}` Alice paddles a kayak on weekends" in shown
    assert "on weekends (fact, self, " in shown and shown.index(chess.fact_id) < shown.index(
        kayak.fact_id
    )
    assert f"`{kayak.fact_id}`" in shown.split("[demoted]:")[1]
    kayak_line = next(line for line in shown.splitlines() if kayak.fact_id in line)
    assert kayak_line.endswith("[demoted]")
    staff = user_facts_listing(services, gw.GUILD, gw.ALICE)
    staff_line = next(line for line in staff.splitlines() if kayak.fact_id in line)
    assert staff_line.endswith("[demoted]")


def test_beyond_the_cap_only_the_least_recalled_demoted_facts_are_evicted_with_history(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = services_with(
        dynamodb, clock, consolidate_every=2, hot_facts_per_person=2, facts_max_per_person=4
    )
    # Active, and of less value than any demoted one: never chosen for eviction.
    active = [
        seed(services, gw.ALICE, "Alice active never recalled", updated_days_ago=50),
        seed(services, gw.ALICE, "Alice active recalled", hits=7, last_hit_days_ago=1),
    ]
    demoted = {
        name: seed(services, gw.ALICE, f"Alice demoted {name}", status=FactStatus.DEMOTED, **kw)
        for name, kw in {
            "oldest": {"updated_days_ago": 40},
            "older": {"updated_days_ago": 30},
            "newer": {"updated_days_ago": 3},
            "recalled": {"hits": 2, "last_hit_days_ago": 60, "updated_days_ago": 90},
        }.items()
    }

    outcome = round_with(services, gw.ALICE)

    assert (outcome.demoted, outcome.evicted) == (0, 2)
    assert stored(services, demoted["oldest"]) is None
    assert stored(services, demoted["older"]) is None
    assert status_of(services, demoted["newer"]) == FactStatus.DEMOTED
    assert status_of(services, demoted["recalled"]) == FactStatus.DEMOTED
    assert [status_of(services, f) for f in active] == [FactStatus.ACTIVE] * 2
    for gone in (demoted["oldest"], demoted["older"]):
        (entry,) = services.repository.history_of(gw.GUILD, gone.fact_id)
        assert (entry.change, entry.actor, entry.old) == (
            FactChange.DELETED,
            HistoryActor.CONSOLIDATION,
            gone.text,
        )
    assert ("FactsEvicted", 2) in outcome_metrics([outcome])

"""Consolidation: batches, the channel lock, exactly-once consumption, the evidence rule."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from botmemory.clock import DAY_MS, ManualClock
from botmemory.consolidation.consolidator import round_reserve_ms
from botmemory.consolidation.model.contract import (
    ConsolidationAnswer,
    MemoryModelError,
    ModelInput,
    ProposedEpisode,
    ProposedFact,
    parse_answer,
)
from botmemory.consolidation.outcome import Outcome, Status, outcome_metrics
from botmemory.records import FactKind, FactStatus
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from localrun import gateway as gw
from localrun.storage import channel_state
from tests.conftest import CountingModel, ScriptedModel, scan_all

T0 = 1_767_225_600_000
SPEAKERS = [gw.ALICE, gw.BOB, gw.CAROL]


def chat(n: int, start_ms: int = T0, speakers: list[str] = SPEAKERS) -> list[dict[str, Any]]:
    return [
        gw.message(
            speakers[i % len(speakers)], f"message {i} about the weekend", start_ms + i * 1000
        )
        for i in range(n)
    ]


def pending(services: MemoryServices, channel: str = gw.CHANNEL) -> int:
    return services.repository.count_pending(channel, 100_000)


def episodes(client: Any) -> list[dict[str, Any]]:
    return [i for i in scan_all(client) if i["sk"]["S"].startswith("EP#")]


def facts(client: Any) -> list[dict[str, Any]]:
    return [i for i in scan_all(client) if i["sk"]["S"].startswith("FACT#")]


def with_model(dynamodb: Any, clock: ManualClock, model: Any, **overrides: Any) -> MemoryServices:
    settings = Settings(table_name="MemoryTable", memory_model="scripted", **overrides)
    return build_services(settings, dynamodb=dynamodb, clock=clock, model=model)


def fact(
    user: str, text: str, evidence: list[int], supersedes: list[str] | None = None
) -> ProposedFact:
    return ProposedFact(
        user_id=user,
        text=text,
        kind=FactKind.PREFERENCE,
        evidence=evidence,
        supersedes=supersedes or [],
    )


def answer(*proposed: ProposedFact, summary: str = "They talked.") -> ConsolidationAnswer:
    return ConsolidationAnswer(
        facts=list(proposed), episode=ProposedEpisode(summary=summary, participants=[])
    )


def number_of(batch: ModelInput, text: str) -> int:
    return next(o.number for o in batch.observations if text in o.text)


# Invariant 1: no model call per event; one call per consolidated batch. ----------------------


def test_below_the_threshold_nothing_is_called_and_at_it_one_call_consumes_the_batch(
    services: MemoryServices, model: CountingModel
) -> None:
    events = chat(20)
    services.recorder.record(events[:19])
    outcomes = services.consolidator.consolidate(gw.CHANNEL)

    assert [o.status for o in outcomes] == [Status.BELOW_THRESHOLD]
    assert model.calls == [] and pending(services) == 19

    services.recorder.record(events[19:])
    outcomes = services.consolidator.consolidate(gw.CHANNEL)

    assert [o.status for o in outcomes] == [Status.CONSOLIDATED]
    assert len(model.calls) == 1 and len(model.calls[0].observations) == 20
    assert outcomes[0].consumed == 20 and pending(services) == 0


def test_a_stream_of_45_messages_costs_two_model_calls(
    services: MemoryServices, model: CountingModel
) -> None:
    for event in chat(45):  # one trigger per event, the worst case for a stream
        services.recorder.record([event])
        services.consolidator.consolidate(gw.CHANNEL)

    assert len(model.calls) == 2
    assert pending(services) == 5


def test_a_backlog_is_one_grown_call_committed_in_transactions_of_at_most_100_actions(
    dynamodb: Any, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = CountingModel()
    services = with_model(dynamodb, clock, model, consolidate_every=20, max_batch=50)
    services.recorder.record(chat(130))
    sent: list[int] = []
    commit = services.repository.commit_consolidation
    monkeypatch.setattr(
        services.repository,
        "commit_consolidation",
        lambda c: (sent.append(c.action_count()), commit(c))[1],
    )

    outcomes = services.consolidator.consolidate(gw.CHANNEL)

    assert [o.consumed for o in outcomes] == [130]
    (call,) = model.calls
    assert len(call.observations) == 130
    assert call.max_output_tokens == 2 * services.settings.model_max_output_tokens
    assert len(sent) == outcomes[0].runs > 1 and max(sent) <= 100
    assert pending(services) == 0
    assert "lock_owner" not in channel_state(services.repository, gw.CHANNEL)  # given back


def test_a_backlog_beyond_the_token_cap_waits_for_the_next_grown_call(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = CountingModel()
    services = with_model(
        dynamodb, clock, model, consolidate_every=20, max_batch=50, batch_max_tokens=2_000
    )
    # 16,000 characters each (ingest's cap), stored as MEMORY_OBSERVATION_CHARS of them.
    services.recorder.record(
        chat(30) + [gw.message(gw.BOB, "word " * 3_200, T0 + 100_000 + i) for i in range(100)]
    )

    outcomes: list[Outcome] = []
    for _ in range(20):  # its worker's turns, then the sweep's for what is left
        outcomes += services.consolidator.consolidate(gw.CHANNEL, force=True)
        if not pending(services):
            break

    assert sum(o.consumed for o in outcomes) == 130 and pending(services) == 0
    assert len(model.calls) == len(outcomes) > 4
    for call in model.calls:  # each call within its cap, a line counted at its full length
        assert sum(len(o.text) // 4 + 16 for o in call.observations) <= 2_000 + 200


# Invariant 2: one consolidation at a time; leases expire; a lost lock commits nothing. ----------


@pytest.mark.usefixtures("serialized_moto")
def test_two_racing_consolidations_consume_each_observation_exactly_once(
    dynamodb: Any, clock: ManualClock
) -> None:
    entered = threading.Barrier(2)

    class SlowModel(CountingModel):
        def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
            time.sleep(0.2)  # hold the lock while the other thread tries for it
            return super().consolidate(batch)

    model = SlowModel()
    services = with_model(dynamodb, clock, model)
    services.recorder.record(chat(25))
    results: list[Any] = []

    def run() -> None:
        entered.wait()
        results.extend(services.consolidator.consolidate(gw.CHANNEL))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)

    statuses = sorted(o.status for o in results)
    assert statuses == sorted([Status.CONSOLIDATED, Status.BUSY])
    assert len(model.calls) == 1
    assert sum(o.consumed for o in results) == 25
    assert pending(services) == 0
    assert len(episodes(dynamodb)) == 1


def test_a_run_whose_lease_expired_and_was_taken_over_commits_nothing(
    dynamodb: Any, clock: ManualClock
) -> None:
    services_b: list[MemoryServices] = []
    b_outcomes: list[Any] = []

    def stall_then_take_over(batch: ModelInput) -> ConsolidationAnswer:
        # While run A waits on its model, its lease runs out and run B takes the channel.
        clock.advance(seconds=901)
        b_outcomes.extend(services_b[0].consolidator.consolidate(gw.CHANNEL))
        return answer(fact(gw.ALICE, "Likes run A", [1]), summary="Run A's summary")

    services_a = with_model(dynamodb, clock, ScriptedModel(stall_then_take_over))
    services_b.append(with_model(dynamodb, clock, CountingModel()))
    services_a.recorder.record(chat(20))

    (a,) = services_a.consolidator.consolidate(gw.CHANNEL)

    assert a.status == Status.REJECTED and a.consumed == 0
    assert [o.status for o in b_outcomes] == [Status.CONSOLIDATED] and b_outcomes[0].consumed == 20
    summaries = [e["summary"]["S"] for e in episodes(dynamodb)]
    assert len(summaries) == 1 and "Run A" not in summaries[0]
    assert all("run A" not in f["text"]["S"] for f in facts(dynamodb))
    assert pending(services_a) == 0


def test_a_crashed_runs_lock_expires_and_the_next_trigger_proceeds(
    services: MemoryServices, clock: ManualClock
) -> None:
    services.recorder.record(chat(20))
    crashed = services.repository.acquire_lock(gw.CHANNEL, "crashed-run", clock.now_ms(), 900_000)
    assert crashed is not None

    (blocked,) = services.consolidator.consolidate(gw.CHANNEL)
    assert blocked.status == Status.BUSY and pending(services) == 20

    clock.advance(seconds=901)
    (after,) = services.consolidator.consolidate(gw.CHANNEL)

    assert after.status == Status.CONSOLIDATED and after.consumed == 20
    assert (
        services.repository.release_lock(crashed) is False
    )  # the crashed run cannot release it either


# Invariant 3: consumed exactly once, or left pending; nothing lost on a fault. ----------------


@pytest.mark.parametrize(
    "failure",
    [
        MemoryModelError("the provider answered 500"),
        TimeoutError("the provider timed out"),
        "invalid json",
        "contract",
    ],
)
def test_a_failing_model_leaves_every_observation_pending_and_the_next_trigger_consumes_them(
    dynamodb: Any, clock: ManualClock, failure: Any
) -> None:
    def fail(batch: ModelInput) -> ConsolidationAnswer:
        if failure == "invalid json":
            return parse_answer('{"facts": [ {"user_id": ')
        if failure == "contract":
            return parse_answer(
                {"facts": [{"user_id": gw.ALICE, "text": "x", "kind": "gossip", "evidence": [1]}]}
            )
        raise failure

    model = ScriptedModel(fail, lambda batch: CountingModel().consolidate(batch))
    services = with_model(dynamodb, clock, model)
    services.recorder.record(chat(20))

    (first,) = services.consolidator.consolidate(gw.CHANNEL)

    assert first.status == Status.MODEL_FAILED and first.consumed == 0
    assert pending(services) == 20
    assert episodes(dynamodb) == [] and facts(dynamodb) == []
    assert "lock_owner" not in channel_state(services.repository, gw.CHANNEL)

    # The channel backs off: a trigger before its next try calls no model.
    (early,) = services.consolidator.consolidate(gw.CHANNEL)
    assert early.status == Status.DEFERRED and len(model.calls) == 1
    clock.advance(seconds=15 * 60)
    (second,) = services.consolidator.consolidate(gw.CHANNEL)

    assert second.status == Status.CONSOLIDATED and second.consumed == 20
    assert pending(services) == 0 and len(episodes(dynamodb)) == 1


def test_observations_consumed_meanwhile_are_not_consumed_twice(
    services: MemoryServices, clock: ManualClock
) -> None:
    services.recorder.record(chat(20))
    observations, _ = services.repository.pending_observations(gw.CHANNEL, 50)
    (done,) = services.consolidator.consolidate(gw.CHANNEL)
    assert done.consumed == 20

    from botmemory.storage.commit import CommitRejected, ConsolidationCommit

    lock = services.repository.acquire_lock(gw.CHANNEL, "late", clock.now_ms(), 60_000)
    assert lock is not None
    with pytest.raises(CommitRejected):
        services.repository.commit_consolidation(
            ConsolidationCommit(lock=lock, scope="x", consumed=observations, now_ms=clock.now_ms())
        )
    assert len(episodes(services.repository.client)) == 1


def test_an_observation_arriving_late_for_its_time_is_still_consumed(
    services: MemoryServices,
) -> None:
    services.recorder.record(chat(20, start_ms=T0 + 100_000))
    services.consolidator.consolidate(gw.CHANNEL)
    # A reaction to an old message, and a delayed retry of an older batch, sort before the
    # consumed ones; they wait in the pending index all the same.
    old = gw.message(gw.ALICE, "an old message", T0)
    services.recorder.record(
        [old, gw.reaction("MESSAGE_REACTION_ADD", old, gw.BOB)] + chat(18, start_ms=T0 + 1)
    )

    assert pending(services) == 20
    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)
    assert outcome.consumed == 20 and pending(services) == 0


# Invariant 4: facts only from a person's own words. ------------------------------------------


def test_bob_saying_alice_likes_sushi_never_becomes_alices_fact(
    dynamodb: Any, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    bob_number: list[int] = []

    def gossip(batch: ModelInput) -> ConsolidationAnswer:
        said_by_bob = number_of(batch, "Alice likes sushi")
        bob_number.append(said_by_bob)
        said_by_alice = number_of(batch, "I play chess")
        return answer(
            fact(gw.ALICE, "Likes sushi", [said_by_bob]),
            fact(gw.ALICE, "Likes sushi and chess", [said_by_alice, said_by_bob]),
            fact(gw.ALICE, "Plays chess", [said_by_alice]),
        )

    services = with_model(dynamodb, clock, ScriptedModel(gossip))
    events = chat(18)
    events.insert(3, gw.message(gw.BOB, "Alice likes sushi, you know", T0 + 3500))
    events.insert(5, gw.message(gw.ALICE, "I play chess on Sundays", T0 + 5500))
    services.recorder.record(events)

    with caplog.at_level(logging.INFO, logger="botmemory.consolidation.judgement"):
        (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    texts = [f["text"]["S"] for f in facts(dynamodb)]
    assert texts == ["Plays chess"]
    assert [d.reason for d in outcome.discarded] == [
        f"cites #{bob_number[0]}, written by someone else",
        f"cites #{bob_number[0]}, written by someone else",
    ]
    assert sum("discarded fact" in r.message for r in caplog.records) == 2


def test_a_fact_about_someone_absent_from_the_batch_is_discarded_and_logged(
    dynamodb: Any, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    absent = "300000000000000009"
    model = ScriptedModel(
        lambda batch: answer(fact(absent, "Likes jazz", [1]), fact(gw.ALICE, "Likes tea", [99]))
    )
    services = with_model(dynamodb, clock, model)
    services.recorder.record(chat(20))

    with caplog.at_level(logging.INFO, logger="botmemory.consolidation.judgement"):
        (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert facts(dynamodb) == []
    assert [d.reason for d in outcome.discarded] == [
        "subject did not speak in this batch",
        "cites #99, which is not in the batch",
    ]
    assert any(
        getattr(r, "reason", "") == "subject did not speak in this batch" for r in caplog.records
    )
    assert outcome.status == Status.CONSOLIDATED  # the rest of the answer still counts


def test_the_bots_own_answers_and_reactions_are_never_evidence(
    dynamodb: Any, clock: ManualClock
) -> None:
    reacted: list[int] = []

    def claims(batch: ModelInput) -> ConsolidationAnswer:
        bot_line = number_of(batch, "You love opera")
        reacted.append(next(o.number for o in batch.observations if o.text.startswith("(reacted")))
        return answer(fact(gw.BOT, "Loves opera", [bot_line]), fact(gw.BOB, "Agrees", reacted))

    services = with_model(dynamodb, clock, ScriptedModel(claims), bot_user_id=gw.BOT)
    events = chat(18)
    events.append(gw.message(gw.BOT, "You love opera, Alice!", T0 + 30_000))
    events.append(gw.reaction("MESSAGE_REACTION_ADD", events[0], gw.BOB))
    services.recorder.record(events)

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert facts(dynamodb) == []
    assert [d.reason for d in outcome.discarded] == [
        "subject did not speak in this batch",
        f"cites #{reacted[0]}, which holds no words of theirs",
    ]


# Deduplication, supersession, episodes, retention, the sweep. -------------------------------


def test_the_same_fact_restated_is_one_item_with_more_hits(
    dynamodb: Any, clock: ManualClock
) -> None:
    def tea(batch: ModelInput) -> ConsolidationAnswer:
        first = batch.observations[0].number
        return answer(
            fact(gw.ALICE, "Likes green tea.", [first]), fact(gw.ALICE, "likes  GREEN tea", [first])
        )

    services = with_model(dynamodb, clock, ScriptedModel(tea), consolidate_every=3)
    services.recorder.record(chat(3, speakers=[gw.ALICE]))
    services.consolidator.consolidate(gw.CHANNEL)
    clock.advance(days=1)
    services.recorder.record(chat(3, start_ms=T0 + 60_000, speakers=[gw.ALICE]))
    services.consolidator.consolidate(gw.CHANNEL)

    (item,) = facts(dynamodb)
    assert item["hits"]["N"] == "2"
    assert int(item["updated_ms"]["N"]) == clock.now_ms()
    assert int(item["created_ms"]["N"]) == clock.now_ms() - DAY_MS


def test_a_superseded_fact_is_kept_but_marked(services: MemoryServices, dynamodb: Any) -> None:
    services.recorder.record(
        [gw.message(gw.ALICE, "I live in Lyon.", T0)]
        + chat(19, start_ms=T0 + 1000, speakers=[gw.BOB])
    )
    services.consolidator.consolidate(gw.CHANNEL)
    services.recorder.record(
        [gw.message(gw.ALICE, "I moved to Berlin.", T0 + 50_000)]
        + chat(19, start_ms=T0 + 51_000, speakers=[gw.BOB])
    )
    services.consolidator.consolidate(gw.CHANNEL)

    by_text = {f["text"]["S"]: f for f in facts(dynamodb)}
    assert by_text["Alice lives in Lyon"]["status"]["S"] == FactStatus.SUPERSEDED.value
    assert "fact_rank" not in by_text["Alice lives in Lyon"]
    assert by_text["Alice moved to Berlin"]["status"]["S"] == FactStatus.ACTIVE.value
    assert [
        f.text for f in services.repository.active_facts("100000000000000001", gw.ALICE, 10)
    ] == ["Alice moved to Berlin"]


def test_in_shadow_mode_supersession_is_counted_and_nothing_is_superseded(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = with_model(dynamodb, clock, CountingModel(), supersession="shadow")
    services.recorder.record(
        [gw.message(gw.ALICE, "I live in Lyon.", T0)]
        + chat(19, start_ms=T0 + 1000, speakers=[gw.BOB])
    )
    services.consolidator.consolidate(gw.CHANNEL)
    services.recorder.record(
        [gw.message(gw.ALICE, "I moved to Berlin.", T0 + 50_000)]
        + chat(19, start_ms=T0 + 51_000, speakers=[gw.BOB])
    )
    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert (outcome.superseded, outcome.shadow_superseded) == (0, 1)
    assert ("FactsSupersededShadow", 1) in outcome_metrics([outcome])
    by_text = {f["text"]["S"]: f for f in facts(dynamodb)}
    assert by_text["Alice lives in Lyon"]["status"]["S"] == FactStatus.ACTIVE.value
    assert by_text["Alice moved to Berlin"]["status"]["S"] == FactStatus.ACTIVE.value


def test_a_person_gains_at_most_three_new_facts_in_one_batch(
    dynamodb: Any, clock: ManualClock
) -> None:
    def five_each(batch: ModelInput) -> ConsolidationAnswer:
        return answer(
            *(
                fact(o.author_id, f"Likes topic {o.text.split()[-1]}", [o.number])
                for o in batch.observations
            )
        )

    services = with_model(dynamodb, clock, ScriptedModel(five_each), consolidate_every=10)
    services.recorder.record(
        [
            gw.message([gw.ALICE, gw.BOB][i % 2], f"I like topic {i}", T0 + i * 1000)
            for i in range(10)
        ]
    )
    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    kept = {
        user: [f for f in facts(dynamodb) if f["user_id"]["S"] == user]
        for user in (gw.ALICE, gw.BOB)
    }
    assert {user: len(found) for user, found in kept.items()} == {gw.ALICE: 3, gw.BOB: 3}
    # The rest are not lost: they wait as candidates for the channel's next round.
    assert outcome.discarded == [] and outcome.deferred == 4
    waiting = services.repository.candidates(gw.CHANNEL)
    assert sorted(c.fact.text for c in waiting if c.fact.user_id == gw.ALICE) == [
        "Likes topic 6",
        "Likes topic 8",
    ]


def test_episodes_beyond_the_cap_are_dropped(dynamodb: Any, clock: ManualClock) -> None:
    services = with_model(
        dynamodb, clock, CountingModel(), consolidate_every=2, episodes_per_channel=4
    )
    for round_ in range(7):
        clock.advance(seconds=10)
        services.recorder.record(chat(2, start_ms=T0 + round_ * 10_000))
        services.consolidator.consolidate(gw.CHANNEL)

    kept = sorted(e["sk"]["S"] for e in episodes(dynamodb))
    assert len(kept) == 4
    assert [e.sk for e in services.repository.recent_episodes(gw.CHANNEL, 10)] == sorted(
        kept, reverse=True
    )


def test_facts_past_retention_are_purged_for_the_participants_touched(
    services: MemoryServices, dynamodb: Any, clock: ManualClock
) -> None:
    services.recorder.record(
        [gw.message(gw.ALICE, "I love kayaking.", T0)] + chat(19, start_ms=T0 + 1)
    )
    services.consolidator.consolidate(gw.CHANNEL)
    assert [f["text"]["S"] for f in facts(dynamodb)] == ["Alice loves kayaking"]

    clock.advance(days=181)
    services.recorder.record(chat(20, start_ms=T0 + 181 * DAY_MS))
    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert outcome.purged == 1
    assert facts(dynamodb) == []


def test_the_sweep_consolidates_a_quiet_channel(
    services: MemoryServices, clock: ManualClock, model: CountingModel
) -> None:
    services.recorder.record(chat(5))
    services.consolidator.consolidate(gw.CHANNEL)

    assert services.consolidator.sweep() == []  # not idle long enough yet
    clock.advance(seconds=31 * 60)
    outcomes = services.consolidator.sweep()

    assert [(o.status, o.consumed) for o in outcomes] == [(Status.CONSOLIDATED, 5)]
    assert len(model.calls) == 1 and pending(services) == 0
    assert "pending_since" not in channel_state(services.repository, gw.CHANNEL)
    clock.advance(seconds=31 * 60)
    assert services.consolidator.sweep() == []


def test_a_batch_of_reactions_and_deletions_needs_no_model_call(
    services: MemoryServices, model: CountingModel, dynamodb: Any
) -> None:
    services.recorder.record(chat(20))
    services.consolidator.consolidate(gw.CHANNEL)
    said = chat(20)
    services.recorder.record(
        [gw.reaction("MESSAGE_REACTION_REMOVE", m, gw.BOB) for m in said[:10]]
        + [gw.delete(m) for m in said[10:]]
    )

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert outcome.status == Status.CONSOLIDATED and outcome.consumed == 20
    assert len(model.calls) == 1 and outcome.model_calls == 0
    assert len(episodes(dynamodb)) == 1


def test_a_message_deleted_before_consolidation_is_not_shown_to_the_model(
    services: MemoryServices, model: CountingModel
) -> None:
    secret = gw.message(gw.ALICE, "my password is hunter2", T0 + 500)
    services.recorder.record([secret, *chat(18), gw.delete(secret)])
    services.consolidator.consolidate(gw.CHANNEL)

    (batch,) = model.calls
    assert all("hunter2" not in o.text for o in batch.observations)
    assert pending(services) == 0


def test_memory_off_consolidates_nothing(dynamodb: Any, clock: ManualClock) -> None:
    on = with_model(dynamodb, clock, CountingModel())
    on.recorder.record(chat(25))
    off = build_services(Settings(table_name="MemoryTable"), dynamodb=dynamodb, clock=clock)

    assert [o.status for o in off.consolidator.consolidate(gw.CHANNEL)] == [Status.OFF]
    assert off.consolidator.sweep() == []
    assert pending(on) == 25 and episodes(dynamodb) == []


def test_no_round_starts_without_time_for_a_model_call(
    services: MemoryServices, clock: ManualClock, model: CountingModel
) -> None:
    services.recorder.record(chat(130))
    # A round's worst case: the model's timeout on every attempt and the table work; two
    # rounds' time, never a grown round's (that needs twice the model's worst case).
    reserve = round_reserve_ms(services.settings)

    backlog = services.consolidator.consolidate(
        gw.CHANNEL, time_left_ms=lambda: reserve if len(model.calls) < 2 else reserve - 1
    )
    clock.advance(seconds=31 * 60)
    swept = services.consolidator.sweep(time_left_ms=lambda: 30_000)

    assert [o.consumed for o in backlog] == [50, 50]  # a third round would not have fitted
    assert swept == [] and pending(services) == 30
    assert [o.consumed for o in services.consolidator.sweep()] == [30]


def test_words_of_someone_who_opted_out_meanwhile_are_dropped_unread(
    services: MemoryServices, dynamodb: Any, model: CountingModel
) -> None:
    services.recorder.record(
        [gw.message(gw.ALICE, "I love hiking in the Alps.", T0)]
        + chat(19, start_ms=T0 + 1000, speakers=[gw.BOB])
    )
    services.opt_outs.opt_out(gw.ALICE)  # after ingest recorded her words

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert outcome.consumed == 19 and pending(services) == 0
    assert all(o.author_id != gw.ALICE for o in model.calls[0].observations)
    assert [i for i in scan_all(dynamodb) if gw.ALICE in str(i)] == []


def test_a_backlog_run_that_cannot_commit_ends_the_round_and_the_rest_waits_its_turn(
    dynamodb: Any, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from botmemory.storage.commit import CommitRejected

    model = CountingModel()
    services = with_model(dynamodb, clock, model, consolidate_every=20, max_batch=50)
    services.recorder.record(chat(130))
    commit = services.repository.commit_consolidation
    sent: list[bool] = []

    def second_refused(c: Any) -> None:
        sent.append(c.keep_lock)
        if len(sent) == 2:  # an erasure (or a lost lease) lands between the first two runs
            services.repository.release_lock(c.lock)
            raise CommitRejected(["ConditionalCheckFailed"])
        commit(c)

    monkeypatch.setattr(services.repository, "commit_consolidation", second_refused)
    outcomes = services.consolidator.consolidate(gw.CHANNEL)

    cut = outcomes[0]
    assert sent[0] is True  # the first run kept the lock for the next
    assert cut.status == Status.CONSOLIDATED and cut.runs == 1 and cut.more_pending
    assert 0 < cut.consumed < 130
    # The next round (the same invocation goes on) takes the rest; each consumed once.
    assert sum(o.consumed for o in outcomes) == 130 and pending(services) == 0
    assert len(model.calls) == len(outcomes) == 2


def test_each_run_writes_the_facts_whose_evidence_it_consumes_and_no_other(
    dynamodb: Any, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = CountingModel()
    services = with_model(dynamodb, clock, model, consolidate_every=20, max_batch=50)
    lines = chat(150)
    for n, hobby in ((5, "hiking"), (70, "chess"), (140, "sailing")):
        lines[n]["d"]["content"] = f"I love {hobby}."
    services.recorder.record(lines)
    commit = services.repository.commit_consolidation
    consumed: set[str] = set()
    placed: list[tuple[set[str], set[str]]] = []  # (this run's consumed, its facts' evidence)

    def record(c: Any) -> None:
        commit(c)
        mine = {o.sk for o in c.consumed}
        consumed.update(mine)
        placed.append((mine, {sk for f in c.facts for sk in f.provenance}))

    monkeypatch.setattr(services.repository, "commit_consolidation", record)
    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert outcome.runs == len(placed) > 2 and outcome.facts_written == 3
    for mine, evidence in placed:
        assert evidence <= mine  # each fact in the commit that consumes its own line
    assert [bool(evidence) for _, evidence in placed].count(True) == 3


def test_one_message_beyond_the_token_cap_is_still_consolidated_alone(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = CountingModel()
    services = with_model(
        dynamodb, clock, model, batch_max_tokens=1_000, observation_chars=4_000, max_batch=50
    )
    # 16,000 characters of a script without spaces (ingest's cap; 4,000 of them are kept):
    # about 4,000 tokens, four times the cap.
    services.recorder.record([gw.message(gw.ALICE, "記" * 16_000, T0), *chat(19, T0 + 1_000)])

    outcomes = services.consolidator.consolidate(gw.CHANNEL, force=True)
    outcomes += services.consolidator.consolidate(gw.CHANNEL, force=True)

    assert len(model.calls[0].observations) == 1  # alone, never stuck
    assert sum(o.consumed for o in outcomes) == 20 and pending(services) == 0

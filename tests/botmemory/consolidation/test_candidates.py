"""Nothing is dropped silently (issue 23, item 4): facts beyond a person's cap of new facts per
round wait as deferred candidates (botmemory.consolidation.candidates) and are kept by later rounds, the
highest priority first; what is not kept is logged with its id and reason and counted.

The production path: IngestFunction records the messages, ConsolidateFunction (from the
table's stream) and SweepFunction run the rounds, with an OpenAI-compatible memory model on
127.0.0.1 that writes facts from the observations it is shown.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from botmemory.clock import ManualClock
from botmemory.consolidation.candidates import MAX_CANDIDATE_ROUNDS, within_cap
from botmemory.consolidation.model.contract import (
    ConsolidationAnswer,
    ModelInput,
    NumberedObservation,
    ProposedEpisode,
    ProposedFact,
    parse_answer,
)
from botmemory.consolidation.model.rules import RulesModel
from botmemory.consolidation.outcome import outcome_metrics
from botmemory.people.erasure import Eraser
from botmemory.records import Fact, FactKind, FactPriority, FactSource, MemoryScope, Persona
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage import keys
from localrun import gateway as gw
from tests.conftest import ScriptedModel, scan_all
from tests.support.fake_memory_model import OBSERVATION_LINE
from tests.support.fake_providers import CompletionServer, serving
from tests.support.lambda_local import TABLE, LambdaContext, LocalLambda, sample_env

T0 = 1_767_225_600_000
SWEEP_MS = 300_000  # SweepFunction's timeout (template.yaml)

# --- an OpenAI-compatible memory model that writes facts ----------------------------------------

_LINE = OBSERVATION_LINE


@dataclass(frozen=True)
class Shown:
    """One observation as the model was shown it."""

    number: int
    kind: str
    author_id: str
    text: str


Writer = Callable[[list[Shown]], list[dict[str, Any]]]


class FactWriterServer(CompletionServer):
    """Chat completions on 127.0.0.1: each answer's facts are written by `writer` from the
    observations of the batch the request renders (an answer of the contract, as JSON)."""

    def __init__(self) -> None:
        super().__init__()
        self.writer: Writer = lambda shown: []
        self.batches: list[list[Shown]] = []

    def answer(self, user_message: str) -> dict[str, Any]:
        shown = [
            Shown(int(m[1]), m[2], m[4], m[5])
            for line in user_message.splitlines()
            if (m := _LINE.match(line))
        ]
        self.batches.append(shown)
        return {
            "facts": self.writer(shown),
            "episode": {"summary": "They talked.", "participants": []},
            "channel_summary": "",
        }


@pytest.fixture(name="memory_model")
def memory_model_fixture() -> Iterator[FactWriterServer]:
    with serving(FactWriterServer()) as server:
        yield server


def proposed(
    user_id: str,
    text: str,
    evidence: list[int],
    priority: str = "taste",
    scope: str = "user",
    kind: str = "preference",
) -> dict[str, Any]:
    return {
        "user_id": user_id,
        "text": text,
        "kind": kind,
        "evidence": evidence,
        "supersedes": [],
        "scope": scope,
        "priority": priority,
    }


class Deployment:
    """The functions as template.yaml declares them, on the test's in-process AWS, with
    the fake memory model; the table read through a repository of the test's own."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        dynamodb: Any,
        model: FactWriterServer,
        **settings: str,
    ) -> None:
        env = sample_env()
        memory = {
            "MEMORY_MODEL": "openai:fake-memory",
            "MEMORY_MODEL_BASE_URL": model.base_url,
            "MEMORY_MODEL_API_KEY": "sk-fake-memory",
            "MEMORY_MODEL_API_KEY_SECRET": "",
            "MEMORY_IDLE_FLUSH_MINUTES": "0",
            **settings,
        }
        for function in ("ConsolidateFunction", "SweepFunction"):
            env.setdefault(function, {}).update(memory)
        self.local = LocalLambda(monkeypatch, env)
        self.dynamodb = dynamodb
        self.model = model
        self.stream_arn = dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        self.seen: set[str] = set()
        self.services = build_services(
            Settings(table_name=TABLE, memory_model="rules", bot_user_id=gw.BOT),
            dynamodb=dynamodb,
            clock=ManualClock(T0),
            model=RulesModel(),
        )

    def ingest(self, events: list[dict[str, Any]]) -> None:
        self.local.invoke("IngestFunction", {"events": events})

    def consolidate(self) -> Any:
        """ConsolidateFunction on the stream records written since the last call."""
        from localrun.samtemplate import passes_filters
        from tests.stack.test_sam_local import stream_records

        filters = self.local.template.stream_filters("ConsolidateFunction")
        fresh = stream_records(self.dynamodb, self.stream_arn, self.seen)
        self.seen |= {r["dynamodb"]["SequenceNumber"] for r in fresh}
        records = [r for r in fresh if passes_filters(filters, r)]
        return self.local.invoke("ConsolidateFunction", {"Records": records})

    def sweep(self) -> Any:
        time.sleep(0.01)  # the sweep takes channels waiting since strictly before now
        # A scheduled run starts with its whole timeout ahead (LocalLambda's context says 30 s,
        # less than the reserve a round needs).
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(LambdaContext, "get_remaining_time_in_millis", lambda _: SWEEP_MS)
            return self.local.invoke("SweepFunction", {})

    def facts(self, user_id: str, scope: str = gw.GUILD) -> list[str]:
        return sorted(f.text for f in self.services.repository.all_facts(scope, user_id))

    def waiting(self) -> list[str]:
        return sorted(c.fact.text for c in self.services.repository.candidates(gw.CHANNEL))


SIX = [
    "I love jazz.",
    "I collect stamps.",
    "I like green tea.",
    "I watch anime.",
    "I paint on weekends.",
    "I am allergic to peanuts.",
]


def six_facts(shown: list[Shown]) -> list[dict[str, Any]]:
    """Alice's six facts, the allergy last and the only one of the highest priority."""
    texts = {
        "jazz": "Alice loves jazz",
        "stamps": "Alice collects stamps",
        "tea": "Alice likes green tea",
        "anime": "Alice watches anime",
        "paint": "Alice paints on weekends",
        "peanuts": "Alice is allergic to peanuts",
    }
    facts = []
    for line in shown:
        for word, text in texts.items():
            if word in line.text and line.author_id == gw.ALICE:
                priority = "safety" if word == "peanuts" else "taste"
                facts.append(proposed(gw.ALICE, text, [line.number], priority, kind="fact"))
    return facts


def test_six_facts_in_one_batch_are_all_kept_the_allergy_in_the_first_round(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, memory_model: FactWriterServer
) -> None:
    memory_model.writer = six_facts
    bot = Deployment(
        monkeypatch,
        dynamodb,
        memory_model,
        MEMORY_NEW_FACTS_PER_PERSON="3",
        MEMORY_CONSOLIDATE_EVERY="6",
    )
    bot.ingest([gw.message(gw.ALICE, text, T0 + i * 1000) for i, text in enumerate(SIX)])

    assert bot.consolidate() == {"batchItemFailures": []}

    assert len(memory_model.batches) == 1
    first = bot.facts(gw.ALICE)
    assert len(first) == 3 and "Alice is allergic to peanuts" in first
    assert len(bot.waiting()) == 3 and not set(bot.waiting()) & set(first)

    # Nothing new is said: the sweep runs the candidates' round without asking the model.
    swept = bot.sweep()

    assert swept["enqueued"] == 1  # its worker runs the round (tests/support/lambda_local.py)
    assert len(memory_model.batches) == 1
    assert bot.facts(gw.ALICE) == sorted(
        [
            "Alice loves jazz",
            "Alice collects stamps",
            "Alice likes green tea",
            "Alice watches anime",
            "Alice paints on weekends",
            "Alice is allergic to peanuts",
        ]
    )
    assert bot.waiting() == []
    # The next sweep has nothing left to do in the channel.
    assert bot.sweep()["enqueued"] == 0


def test_candidates_are_considered_first_in_a_round_with_new_observations(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, memory_model: FactWriterServer
) -> None:
    memory_model.writer = six_facts
    bot = Deployment(
        monkeypatch,
        dynamodb,
        memory_model,
        MEMORY_NEW_FACTS_PER_PERSON="3",
        MEMORY_CONSOLIDATE_EVERY="6",
    )
    bot.ingest([gw.message(gw.ALICE, text, T0 + i * 1000) for i, text in enumerate(SIX)])
    bot.consolidate()
    waiting = bot.waiting()

    # Six more lines with six more (new) facts: the three waiting are kept before them.
    memory_model.writer = lambda shown: [
        proposed(gw.ALICE, f"Alice plays game {line.number}", [line.number]) for line in shown
    ]
    bot.ingest([gw.message(gw.ALICE, f"game {i}", T0 + 60_000 + i * 1000) for i in range(6)])
    bot.consolidate()

    kept = bot.facts(gw.ALICE)
    assert set(waiting) <= set(kept) and len(kept) == 6
    assert bot.waiting() == sorted(f"Alice plays game {n}" for n in range(1, 7))


# --- the same rules, one round at a time -------------------------------------------------------


def answer(*facts: ProposedFact) -> ConsolidationAnswer:
    return ConsolidationAnswer(
        facts=list(facts), episode=ProposedEpisode(summary="They talked.", participants=[])
    )


def fact(text: str, number: int, priority: FactPriority = FactPriority.TASTE) -> ProposedFact:
    return ProposedFact(
        user_id=gw.ALICE,
        text=text,
        kind=FactKind.FACT,
        evidence=[number],
        priority=priority,
    )


def services_with(
    dynamodb: Any, clock: ManualClock, model: Any, **overrides: Any
) -> MemoryServices:
    settings = Settings(
        table_name=TABLE,
        memory_model="scripted",
        bot_user_id=gw.BOT,
        consolidate_every=1,
        idle_flush_minutes=0,
        **overrides,
    )
    return build_services(settings, dynamodb=dynamodb, clock=clock, model=model)


def test_a_candidate_deferred_for_ever_is_dropped_after_its_rounds_with_a_logged_reason(
    dynamodb: Any, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Each round brings a new safety fact, so a taste fact never fits a cap of one: it waits
    MAX_CANDIDATE_ROUNDS rounds, then goes, with its id and reason logged and counted."""

    def each_round(batch: ModelInput) -> ConsolidationAnswer:
        line = batch.observations[-1]
        if "first" in line.text:
            return answer(
                fact("Alice likes jazz", 1), fact("Alice has asthma", 1, FactPriority.SAFETY)
            )
        return answer(fact(f"Alice needs medicine {line.text}", 1, FactPriority.SAFETY))

    services = services_with(dynamodb, clock, ScriptedModel(each_round), new_facts_per_person=1)
    jazz = None
    outcomes = []
    for round_ in range(MAX_CANDIDATE_ROUNDS + 1):
        clock.advance(seconds=10)
        text = "first" if round_ == 0 else f"dose {round_}"
        services.recorder.record([gw.message(gw.ALICE, text, clock.now_ms())])
        with caplog.at_level("INFO", logger="botmemory.consolidation.judgement"):
            (outcome,) = services.consolidator.consolidate(gw.CHANNEL)
        outcomes.append(outcome)
        waiting = services.repository.candidates(gw.CHANNEL)
        if round_ < MAX_CANDIDATE_ROUNDS:
            (jazz,) = waiting
            assert jazz.fact.text == "Alice likes jazz" and jazz.rounds == round_
    assert jazz is not None

    assert services.repository.candidates(gw.CHANNEL) == []
    (dropped,) = outcomes[-1].discarded
    assert dropped.fact_id == jazz.fact.fact_id
    assert dropped.reason == f"still beyond the cap after {MAX_CANDIDATE_ROUNDS} rounds waiting"
    assert ("FactsDiscarded", 1) in outcome_metrics(outcomes[-1:])
    logged = [r for r in caplog.records if r.getMessage() == "discarded fact"]
    assert [(r.__dict__["fact_id"], r.__dict__["reason"]) for r in logged] == [
        (dropped.fact_id, dropped.reason)
    ]
    # The safety facts were all kept as they came; the jazz fact never was.
    stored = [f.text for f in services.repository.all_facts(gw.GUILD, gw.ALICE)]
    assert "Alice has asthma" in stored and "Alice likes jazz" not in stored
    assert len(stored) == 1 + MAX_CANDIDATE_ROUNDS


def test_the_rules_model_ranks_an_allergy_first() -> None:
    batch = ModelInput(
        channel_id=gw.CHANNEL,
        observations=[
            NumberedObservation(
                number=1, author_id=gw.ALICE, author_name="Alice", kind="msg", text=text
            )
            for text in ["I love jazz.", "I am allergic to peanuts."]
        ],
    )
    facts = {f.text: f.priority for f in RulesModel().consolidate(batch).facts}
    assert facts == {
        "Alice loves jazz": FactPriority.TASTE,
        "Alice is allergic to peanuts": FactPriority.SAFETY,
    }


@pytest.mark.parametrize(
    ("given", "read"),
    [
        ("safety", FactPriority.SAFETY),
        (" Identity ", FactPriority.IDENTITY),
        (1, FactPriority.SAFETY),
        (3, FactPriority.COMMITMENT),
        ("urgent!!", FactPriority.TASTE),
        (99, FactPriority.TASTE),
        (None, FactPriority.TASTE),
        (True, FactPriority.TASTE),
    ],
)
def test_a_missing_or_invalid_priority_is_read_as_the_lowest(given: Any, read: Any) -> None:
    item = proposed(gw.ALICE, "Alice likes tea", [1])
    item["priority"] = given
    parsed = parse_answer({"facts": [item], "episode": {"summary": "s", "participants": []}})
    assert [f.priority for f in parsed.facts] == [read] and parsed.rejected == []


def test_within_the_cap_the_highest_priority_then_a_waiting_candidate_come_first() -> None:
    def stored(fact_id: str) -> Fact:
        return Fact(
            fact_id=fact_id,
            scope=gw.GUILD,
            user_id=gw.ALICE,
            text=fact_id,
            kind=FactKind.FACT,
            source=FactSource.SELF,
            created_ms=T0,
            updated_ms=T0,
        )

    facts = [stored(i) for i in ("taste-new", "taste-waiting", "safety", "known")]
    priorities = {"safety": FactPriority.SAFETY}
    kept, over = within_cap(facts, ["known"], 2, priorities, ["taste-waiting"])
    assert [f.fact_id for f in kept] == ["safety", "taste-waiting", "known"]
    assert [f.fact_id for f in over] == ["taste-new"]


# --- erasure and opt-out take candidates with everything else ---------------------------------


def candidates_in(client: Any) -> list[dict[str, Any]]:
    return [i for i in scan_all(client) if i["sk"]["S"].startswith(keys.CANDIDATE_PREFIX)]


def test_forgetme_deletes_the_persons_waiting_candidates_whole_table_scan(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = ScriptedModel(answer(*(fact(f"Alice likes topic {i}", 1) for i in range(5))))
    services = services_with(dynamodb, clock, model, new_facts_per_person=2)
    services.recorder.record([gw.message(gw.ALICE, "I like many topics.", T0)])
    services.consolidator.consolidate(gw.CHANNEL)
    assert len(candidates_in(dynamodb)) == 3

    Eraser(services.repository, clock=clock).erase(gw.ALICE)

    assert candidates_in(dynamodb) == []
    left = [i for i in scan_all(dynamodb) if gw.ALICE in json.dumps(i)]
    assert left == []


def test_a_candidate_whose_subject_opted_out_is_dropped_not_kept(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = ScriptedModel(answer(*(fact(f"Alice likes topic {i}", 1) for i in range(3))))
    services = services_with(dynamodb, clock, model, new_facts_per_person=2)
    services.recorder.record([gw.message(gw.ALICE, "I like many topics.", T0)])
    services.consolidator.consolidate(gw.CHANNEL)
    assert len(candidates_in(dynamodb)) == 1
    services.opt_outs.opt_out(gw.ALICE)  # the list alone, before any erasure ran
    clock.advance(seconds=60)

    (outcome,) = services.consolidator.sweep()

    assert candidates_in(dynamodb) == []
    assert [d.reason for d in outcome.discarded] == [
        "its subject or someone it rests on opted out or is being erased"
    ]
    assert len(services.repository.all_facts(gw.GUILD, gw.ALICE)) == 2


def test_a_candidate_whose_message_was_deleted_is_dropped(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = ScriptedModel(answer(*(fact(f"Alice likes topic {i}", 1) for i in range(3))), answer())
    services = services_with(dynamodb, clock, model, new_facts_per_person=2)
    said = gw.message(gw.ALICE, "I like many topics.", T0)
    services.recorder.record([said])
    services.consolidator.consolidate(gw.CHANNEL)
    services.recorder.record([gw.delete(said)])

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert candidates_in(dynamodb) == []
    assert "a message it rests on was deleted" in [d.reason for d in outcome.discarded]


def test_erasing_someone_who_taught_a_waiting_candidate_deletes_it(
    dynamodb: Any, clock: ManualClock
) -> None:
    """Persona knowledge waiting as a candidate is no one's fact, yet it rests on its
    teachers' words: the erasure of either finds it in the channels they spoke in."""
    tutor = Persona(
        persona_id="tutor",
        lineage_id="d-tutor",
        name="Tutor",
        prompt="You are a tutor.\n{memory}",
        channels=[gw.CHANNEL],
    )
    knowledge = [
        ProposedFact(
            user_id=keys.PERSONA_SUBJECT,
            text=f"Homework {i} is due on Fridays",
            kind=FactKind.FACT,
            evidence=[1, 2],
            scope=MemoryScope.PERSONA,
        )
        for i in range(2)
    ]
    settings = Settings(
        table_name=TABLE,
        memory_model="scripted",
        bot_user_id=gw.BOT,
        consolidate_every=1,
        new_facts_per_person=1,
    )
    services = build_services(
        settings,
        dynamodb=dynamodb,
        clock=clock,
        model=ScriptedModel(answer(*knowledge)),
        deployment_personas=lambda: [tutor],
    )
    services.recorder.record(
        [
            gw.message(gw.ALICE, "Homework is due Friday.", T0),
            gw.message(gw.BOB, "Homework: every Friday.", T0 + 1000),
        ]
    )
    services.consolidator.consolidate(gw.CHANNEL, force=True)
    (waiting,) = services.repository.candidates(gw.CHANNEL)
    assert waiting.fact.evidence_user_ids == [gw.ALICE, gw.BOB]

    Eraser(services.repository, clock=clock, lineages=lambda scope: ["d-tutor"]).erase(gw.BOB)

    assert candidates_in(dynamodb) == []
    assert [i for i in scan_all(dynamodb) if gw.BOB in json.dumps(i)] == []


def test_an_unreadable_candidate_is_deleted_logged_and_counted_and_the_rest_kept(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = ScriptedModel(answer(*(fact(f"Alice likes topic {i}", 1) for i in range(3))))
    services = services_with(dynamodb, clock, model, new_facts_per_person=2)
    services.recorder.record([gw.message(gw.ALICE, "I like many topics.", T0)])
    services.consolidator.consolidate(gw.CHANNEL)
    dynamodb.put_item(
        TableName=TABLE,
        Item={
            "pk": {"S": keys.channel_pk(gw.CHANNEL)},
            "sk": {"S": keys.candidate_sk("0bad0bad")},
            "fact": {"S": "<not a fact>"},
        },
    )
    clock.advance(seconds=60)

    (outcome,) = services.consolidator.sweep()

    assert ("CandidatesUnreadable", 1) in outcome_metrics([outcome])
    assert outcome.candidates_kept == 1 and candidates_in(dynamodb) == []
    assert len(services.repository.all_facts(gw.GUILD, gw.ALICE)) == 3

"""Invariants 7, 12 and 14, as the attack: erasure wins every race, and finds by id what names
a person.

Two sets of services stand for two containers sharing one table. A model held mid-call lets
the test erase, opt out or forget in the other container while a consolidation is thinking;
then it is released and must commit nothing of the person. Also here: the pointers that let
erasure find, by id and without a scan, what others wrote naming someone, and the key that
keeps the opt-out list from naming anyone.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

import pytest

from botmemory.clock import DAY_MS, ManualClock, epoch_seconds
from botmemory.consolidation.model.contract import (
    ConsolidationAnswer,
    ModelInput,
    ProposedEpisode,
    ProposedFact,
)
from botmemory.consolidation.model.rules import RulesModel
from botmemory.consolidation.outcome import Outcome, Status
from botmemory.people.erasure import Eraser
from botmemory.people.optout import (
    HASH_KEY_ENV,
    HASH_KEY_SECRET_ENV,
    HashKeyError,
    hash_key_from_environment,
    legacy_hash,
)
from botmemory.records import Fact, FactKind
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.table import ItemRef
from localrun import gateway as gw
from localrun.storage import put_items
from tests.conftest import scan_all

T0 = 1_767_225_600_000
MINUTE_MS = 60_000


class HeldModel:
    """The rules model, held mid-call until the test releases it."""

    def __init__(self, inner: Any | None = None) -> None:
        self.name = "held"
        self.inner = inner or RulesModel()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        self.calls += 1
        if self.calls == 1:  # only the first call is held
            self.entered.set()
            assert self.release.wait(30), "the test never released the model"
        return self.inner.consolidate(batch)


def container(dynamodb: Any, clock: ManualClock, model: Any | None = None) -> MemoryServices:
    settings = Settings(table_name="MemoryTable", memory_model="rules", bot_user_id=gw.BOT)
    return build_services(settings, dynamodb=dynamodb, clock=clock, model=model or RulesModel())


def held_round(
    services: MemoryServices, model: HeldModel
) -> tuple[threading.Thread, list[Outcome]]:
    """A consolidation started in its own thread, stopped inside the model call."""
    outcomes: list[Outcome] = []
    thread = threading.Thread(
        target=lambda: outcomes.extend(services.consolidator.consolidate(gw.CHANNEL, force=True))
    )
    thread.start()
    assert model.entered.wait(30)
    return thread, outcomes


def release(model: HeldModel, thread: threading.Thread) -> None:
    model.release.set()
    thread.join(30)
    assert not thread.is_alive()


def erase(services: MemoryServices, clock: ManualClock, user_id: str) -> None:
    """`/forgetme`, as the erasure module runs it (marker first, then the deletes)."""
    Eraser(services.repository, clock=clock).erase(user_id)


def holding(dynamodb: Any, *needles: str) -> list[dict[str, Any]]:
    """Every item that holds one of these (an id, a name), case-insensitively."""
    return [
        i
        for i in scan_all(dynamodb)
        if any(n.casefold() in json.dumps(i).casefold() for n in needles)
    ]


def facts_of(services: MemoryServices, user_id: str) -> list[Fact]:
    return services.repository.all_facts(gw.GUILD, user_id)


def pending(services: MemoryServices) -> int:
    return services.repository.count_pending(gw.CHANNEL, 100_000)


# Erasure during the model call ---------------------------------------------------------------


def test_an_erasure_during_the_model_call_wins_even_when_the_relay_redelivers_her_words(
    dynamodb: Any, clock: ManualClock, serialized_moto: None
) -> None:
    model = HeldModel()
    consolidating, commands = container(dynamodb, clock, model), container(dynamodb, clock)
    said = gw.message(gw.ALICE, "I love hiking in the Alps.", T0)
    commands.recorder.record([said, gw.message(gw.BOB, "I love playing chess.", T0 + 1000)])

    thread, outcomes = held_round(consolidating, model)
    erase(commands, clock, gw.ALICE)
    commands.recorder.record([said])  # delivery is at least once: the relay retries its batch
    release(model, thread)

    assert outcomes[0].status == Status.REJECTED
    again = consolidating.consolidator.consolidate(gw.CHANNEL, force=True)
    assert again[-1].status == Status.CONSOLIDATED and pending(consolidating) == 0
    assert [f.text for f in facts_of(consolidating, gw.BOB)] != []  # Bob's memory goes on
    assert holding(dynamodb, gw.ALICE, "Alice") == []


def test_an_episode_naming_someone_erased_during_the_model_call_does_not_survive(
    dynamodb: Any, clock: ManualClock, serialized_moto: None
) -> None:
    model = HeldModel()
    consolidating, commands = container(dynamodb, clock, model), container(dynamodb, clock)
    commands.recorder.record(
        [
            gw.message(gw.BOB, f"<@{gw.CAROL}> lent me her bike yesterday.", T0),
            gw.message(gw.ALICE, f"Ask <@!{gw.CAROL}> about the trail then.", T0 + 1000),
        ]
    )

    thread, outcomes = held_round(consolidating, model)
    erase(commands, clock, gw.CAROL)
    release(model, thread)

    assert outcomes[0].status == Status.REJECTED  # the episode and the pointers named her
    again = consolidating.consolidator.consolidate(gw.CHANNEL, force=True)
    assert again[-1].status == Status.CONSOLIDATED and pending(consolidating) == 0
    assert holding(dynamodb, gw.CAROL) == []
    assert [i for i in scan_all(dynamodb) if i["sk"]["S"].startswith(keys.EPISODE_PREFIX)]


def test_words_of_someone_erased_arriving_after_the_erasure_are_dropped_unread(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = container(dynamodb, clock)
    erase(services, clock, gw.ALICE)
    # A relay retry, or an event that was in flight: ingest stores it (no read per event).
    services.recorder.record(
        [
            gw.message(gw.ALICE, "I love hiking in the Alps.", T0),
            gw.message(gw.BOB, "I love playing chess.", T0 + 1000),
        ]
    )

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL, force=True)

    assert outcome.status == Status.CONSOLIDATED and pending(services) == 0
    assert holding(dynamodb, gw.ALICE, "Alice") == []


# Opting out with a stale cache elsewhere ----------------------------------------------------


def test_optout_wins_over_a_stale_ingest_cache_in_another_container(
    dynamodb: Any, clock: ManualClock
) -> None:
    stale, commands = container(dynamodb, clock), container(dynamodb, clock)
    assert not stale.opt_outs.is_opted_out(gw.ALICE)  # its cache: nobody opted out

    commands.opt_outs.opt_out(gw.ALICE)  # /memory optout, served by another container
    clock.advance(ms=10_000)  # well inside the stale container's minute
    result = stale.recorder.record(
        [
            gw.message(gw.ALICE, "I love hiking in the Alps.", clock.now_ms()),
            gw.message(gw.BOB, "I love playing chess.", clock.now_ms() + 1000),
        ]
    )
    assert result.stored == 2  # slipped through the stale cache

    (outcome,) = stale.consolidator.consolidate(gw.CHANNEL, force=True)

    assert outcome.status == Status.CONSOLIDATED and pending(stale) == 0
    assert facts_of(stale, gw.ALICE) == []
    assert holding(dynamodb, gw.ALICE, "Alice") == []


def test_an_optout_during_the_model_call_refuses_the_commit(
    dynamodb: Any, clock: ManualClock, serialized_moto: None
) -> None:
    model = HeldModel()
    consolidating, commands = container(dynamodb, clock, model), container(dynamodb, clock)
    commands.recorder.record([gw.message(gw.ALICE, "I love hiking in the Alps.", T0)])

    thread, outcomes = held_round(consolidating, model)
    commands.opt_outs.opt_out(gw.ALICE)
    release(model, thread)

    assert outcomes[0].status == Status.REJECTED
    consolidating.consolidator.consolidate(gw.CHANNEL, force=True)
    assert facts_of(consolidating, gw.ALICE) == [] and pending(consolidating) == 0
    assert holding(dynamodb, gw.ALICE, "Alice") == []


# Forget ---------------------------------------------------------------------------------------


def _hiking_fact(services: MemoryServices) -> Fact:
    services.recorder.record([gw.message(gw.ALICE, "I love hiking in the Alps.", T0)])
    services.consolidator.consolidate(gw.CHANNEL, force=True)
    (fact,) = facts_of(services, gw.ALICE)
    return fact


def forget(services: MemoryServices, clock: ManualClock, fact: Fact) -> None:
    now = clock.now_ms()
    services.repository.forget_facts([fact], now, epoch_seconds(now + 30 * DAY_MS))


def test_a_forgotten_fact_does_not_come_back_from_a_restatement_said_before_the_forget(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = container(dynamodb, clock)
    fact = _hiking_fact(services)
    clock.advance(ms=MINUTE_MS)
    services.recorder.record([gw.message(gw.ALICE, "I love hiking in the Alps.", clock.now_ms())])
    clock.advance(ms=MINUTE_MS)
    forget(services, clock, fact)  # /memory forget while the restatement waits

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL, force=True)

    assert outcome.status == Status.CONSOLIDATED and pending(services) == 0
    assert facts_of(services, gw.ALICE) == []
    assert [d.reason for d in outcome.discarded] == ["forgotten by its subject"]


class Restating:
    """A model that proposes, from Alice's first line, the fact it states (a real model does,
    even when the fact is among her current ones)."""

    name = "restating"

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        line = next(o for o in batch.observations if o.author_id == gw.ALICE)
        return ConsolidationAnswer(
            facts=[
                ProposedFact(
                    user_id=gw.ALICE,
                    text="Loves hiking in the Alps",
                    kind=FactKind.PREFERENCE,
                    evidence=[line.number],
                )
            ],
            episode=ProposedEpisode(summary="They talked.", participants=[]),
        )


def test_a_forget_during_the_model_call_wins(
    dynamodb: Any, clock: ManualClock, serialized_moto: None
) -> None:
    model = HeldModel(Restating())
    first = container(dynamodb, clock, Restating())
    fact = _hiking_fact(first)
    consolidating, commands = container(dynamodb, clock, model), container(dynamodb, clock)
    clock.advance(ms=MINUTE_MS)
    commands.recorder.record([gw.message(gw.ALICE, "I love hiking in the Alps.", clock.now_ms())])
    clock.advance(ms=MINUTE_MS)

    thread, outcomes = held_round(consolidating, model)
    forget(commands, clock, fact)
    release(model, thread)

    assert outcomes[0].status == Status.CONSOLIDATED and pending(consolidating) == 0
    assert [d.reason for d in outcomes[0].discarded] == ["forgotten by its subject"]
    assert facts_of(consolidating, gw.ALICE) == []


def test_a_forget_between_the_tombstone_read_and_the_commit_wins(
    dynamodb: Any, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = container(dynamodb, clock, Restating())
    fact = _hiking_fact(services)
    clock.advance(ms=MINUTE_MS)
    services.recorder.record([gw.message(gw.ALICE, "I love hiking in the Alps.", clock.now_ms())])
    clock.advance(ms=MINUTE_MS)
    read = services.repository.forgotten_times

    def then_forget(facts: Any) -> dict[tuple[str, str, str], int]:
        found = read(facts)  # nothing forgotten yet ...
        forget(services, clock, fact)  # ... and the forget lands right after
        return found

    monkeypatch.setattr(services.repository, "forgotten_times", then_forget)
    (outcome,) = services.consolidator.consolidate(gw.CHANNEL, force=True)

    assert outcome.status == Status.REJECTED and pending(services) == 1
    monkeypatch.setattr(services.repository, "forgotten_times", read)
    services.consolidator.consolidate(gw.CHANNEL, force=True)
    assert facts_of(services, gw.ALICE) == [] and pending(services) == 0


def test_a_restatement_said_after_the_forget_remembers_it_again(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = container(dynamodb, clock)
    fact = _hiking_fact(services)
    clock.advance(ms=MINUTE_MS)
    forget(services, clock, fact)
    clock.advance(ms=MINUTE_MS)
    services.recorder.record([gw.message(gw.ALICE, "I love hiking in the Alps.", clock.now_ms())])

    services.consolidator.consolidate(gw.CHANNEL, force=True)

    assert [f.fact_id for f in facts_of(services, gw.ALICE)] == [fact.fact_id]


# Who is named: pointers erasure finds by id ---------------------------------------------------


def named_of(services: MemoryServices, user_id: str) -> list[tuple[str, str]]:
    """(channel, target sort key) of every Named pointer under this person."""
    found: list[tuple[str, str]] = []
    for ref in services.repository.items_of_user(user_id):
        if ref.kind == keys.ItemKind.NAMED:
            named = services.repository.named_at(ref)
            assert named is not None and named.user_id == user_id
            found.append((named.channel_id, named.target_sk))
    return found


def as_member(event: dict[str, Any], name: str) -> dict[str, Any]:
    """The event with its author going by this display name in the server."""
    event["d"]["author"]["global_name"] = name
    event["d"]["member"]["nick"] = name
    return event


def test_a_mention_by_id_leaves_a_pointer_to_the_observation_and_the_episode(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = container(dynamodb, clock)
    services.recorder.record([gw.message(gw.BOB, f"<@{gw.CAROL}> lent me her bike.", T0)])

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL, force=True)

    targets = named_of(services, gw.CAROL)
    assert (gw.CHANNEL, services.repository.recent_observations(gw.CHANNEL, 1)[0].sk) in targets
    episode = services.repository.recent_episodes(gw.CHANNEL, 1)[0]
    assert outcome.episode_id == episode.episode_id
    if gw.CAROL in episode.summary:  # the episode names her too: erasure finds it by id
        assert (gw.CHANNEL, episode.sk) in targets
    # A person's own words are theirs, not a pointer (the episode names Bob as a speaker).
    assert [t for _, t in named_of(services, gw.BOB) if t.startswith(keys.OBS_PREFIX)] == []


def test_a_distinctive_name_leaves_a_pointer(dynamodb: Any, clock: ManualClock) -> None:
    services = container(dynamodb, clock)
    services.recorder.record([as_member(gw.message(gw.CAROL, "Hi all.", T0), "Zephyrine")])
    services.consolidator.consolidate(gw.CHANNEL, force=True)  # the registry learns her name
    services.recorder.record([gw.message(gw.BOB, "zephyrine's bike is fast.", T0 + 60_000)])

    services.consolidator.consolidate(gw.CHANNEL, force=True)

    bobs = services.repository.recent_observations(gw.CHANNEL, 1)[0]
    assert (gw.CHANNEL, bobs.sk) in named_of(services, gw.CAROL)


def test_a_common_word_nickname_or_a_shared_name_names_nobody(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = container(dynamodb, clock)
    services.recorder.record(
        [
            as_member(gw.message(gw.CAROL, "Hi all.", T0), "the"),
            as_member(gw.message(gw.ALICE, "Hello.", T0 + 1000), "Samwise"),
            as_member(gw.message(gw.BOB, "Hey.", T0 + 2000), "Samwise"),
        ]
    )
    services.consolidator.consolidate(gw.CHANNEL, force=True)
    services.recorder.record(
        [gw.message(gw.BOT, "The trail is long; Samwise knows the way.", T0 + 60_000)]
    )

    services.consolidator.consolidate(gw.CHANNEL, force=True)

    assert named_of(services, gw.CAROL) == []
    assert named_of(services, gw.ALICE) == [] and named_of(services, gw.BOB) == []


def test_the_name_registry_learns_each_author_under_their_current_name(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = container(dynamodb, clock)
    services.recorder.record(
        [
            as_member(gw.message(gw.ALICE, "Hello.", T0), "Samwise"),
            as_member(gw.message(gw.BOB, "Hey.", T0 + 1000), "Samwise"),
        ]
    )
    services.consolidator.consolidate(gw.CHANNEL, force=True)

    # Under every name each goes by: the nickname, and the global and account names too.
    assert services.repository.name_registry(gw.GUILD, 10) == {
        "samwise": sorted([gw.ALICE, gw.BOB]),
        "alice": [gw.ALICE],
        "bob": [gw.BOB],
    }


def test_pointers_beyond_the_transaction_are_written_after_it(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = container(dynamodb, clock)
    many = [str(310000000000000000 + i) for i in range(40)]
    services.recorder.record(
        [
            gw.message(gw.BOB, " ".join(f"<@{m}>" for m in many[i : i + 4]) + " hi", T0 + i)
            for i in range(0, 40, 4)
        ]
    )

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL, force=True)

    assert outcome.status == Status.CONSOLIDATED
    assert all(named_of(services, m) for m in many)


# The opt-out list names nobody ---------------------------------------------------------------


def test_the_optout_list_names_nobody_even_to_someone_who_knows_the_member_list(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = container(dynamodb, clock)
    services.opt_outs.opt_out(gw.ALICE)
    members = [gw.ALICE, gw.BOB, gw.CAROL]
    guesses = {hashlib.sha256(m.encode()).hexdigest() for m in members} | {
        legacy_hash(m) for m in members
    }

    listed = {i["sk"]["S"] for i in scan_all(dynamodb) if i["pk"]["S"] == keys.OPT_OUT_PK}

    assert len(listed) == 1 and not listed & guesses
    assert services.opt_outs.is_opted_out(gw.ALICE)


def test_an_optout_stored_before_the_key_is_still_honoured_and_rewritten_keyed(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = container(dynamodb, clock)
    put_items(services.repository, [{"pk": keys.OPT_OUT_PK, "sk": legacy_hash(gw.ALICE)}])

    assert services.opt_outs.barred([gw.ALICE, gw.BOB]) == {gw.ALICE}
    assert services.repository.opted_out_hashes() == {services.opt_outs.hash_of(gw.ALICE)}


@pytest.mark.parametrize(
    "environ",
    [
        {},  # nothing, in AWS
        {"AWS_LAMBDA_FUNCTION_NAME": "f", "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:8000"},
        {"AWS_ENDPOINT_URL_DYNAMODB": "https://dynamodb.us-east-1.amazonaws.com"},
        {HASH_KEY_ENV: "short"},
        {HASH_KEY_ENV: "k" * 32, HASH_KEY_SECRET_ENV: "arn:aws:secretsmanager:x"},
    ],
)
def test_no_deployed_function_hashes_with_a_constant_key(environ: dict[str, str]) -> None:
    with pytest.raises(HashKeyError):
        hash_key_from_environment(environ)


def test_the_development_key_serves_a_local_table_only() -> None:
    local = hash_key_from_environment({"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:8000"})
    given = hash_key_from_environment({HASH_KEY_ENV: "k" * 32})
    assert local and given == b"k" * 32 and local != given


def test_a_deployed_function_reads_the_key_from_its_secret(dynamodb: Any) -> None:
    import boto3

    client = boto3.client("secretsmanager", region_name="us-east-1")
    arn = client.create_secret(Name="hash-key-test", SecretString="s" * 64)["ARN"]
    environ = {HASH_KEY_SECRET_ENV: arn, "AWS_LAMBDA_FUNCTION_NAME": "IngestFunction"}
    assert hash_key_from_environment(environ) == b"s" * 64


def test_the_erasure_marker_and_the_optout_use_one_hash(dynamodb: Any, clock: ManualClock) -> None:
    services = container(dynamodb, clock)
    services.opt_outs.opt_out(gw.ALICE)
    erase(services, clock, gw.ALICE)
    listed = {
        i["pk"]["S"]: i["sk"]["S"]
        for i in scan_all(dynamodb)
        if i["pk"]["S"] in (keys.OPT_OUT_PK, keys.ERASED_PK)
    }
    assert listed[keys.OPT_OUT_PK] == listed[keys.ERASED_PK] == services.opt_outs.hash_of(gw.ALICE)
    assert ItemRef(keys.ERASED_PK, listed[keys.ERASED_PK]).kind == keys.ItemKind.OTHER

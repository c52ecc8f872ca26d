"""The consolidation commit: everything one consolidation round writes, in one transaction.

Facts, supersessions, their history entries, the episode, episodes beyond the cap, the channel
summary (rolled, archived, or dropped for a deleted message), consumption of the batch,
deletion of opted-out words, the member markers of the persona that learned something of a
person, the quarantine record of a batch that kept failing, and the release of the channel
lock (with the channel's failure record) go into one `TransactWriteItems`, so a round either
happens whole or not at all. The profiles and name registry entries of the people seen are
not in it: they are written idempotently after it (botmemory.storage.round_people), which
keeps four actions a speaker out of the budget. DynamoDB takes at most
`MAX_TRANSACTION_ACTIONS` actions in one transaction; `ConsolidationCommit.room_left` is the
one place that budget is counted. `CommitStore`, part of `MemoryRepository` (see
repository.py), sends it.

Erasure wins every race: the commit checks, for every person it writes anything of (for a
persona's knowledge: everyone whose words it rests on), that their erasure marker and their
opt-out item do not exist, and for every fact it writes, that the fact was not forgotten after
its newest evidence was said. An erasure, an opt-out or a forget that lands while the model is
thinking makes the whole commit fail, and every observation stays pending for a round that
reads the new state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from botmemory.records import (
    Attempts,
    Candidate,
    ChannelSummary,
    Episode,
    Fact,
    FactHistory,
    FactStatus,
    MemoryScope,
    Named,
    Observation,
    Quarantine,
)
from botmemory.storage import keys
from botmemory.storage.items import (
    FACT_CHANNEL_SETS,
    attempts_update,
    attribute,
    candidate_values,
    episode_values,
    fact_key,
    forgotten_key,
    history_puts,
    key,
    named_values,
    observation_key,
    quarantine_values,
    state_key,
    to_item,
)
from botmemory.storage.personas import PERSONA_MEMBER_PREFIX
from botmemory.storage.table import Table, error_code

# DynamoDB refuses a transaction of more than 100 actions.
MAX_TRANSACTION_ACTIONS = 100


@dataclass(frozen=True)
class Lock:
    """A channel's consolidation lock as taken: its owner and fencing token."""

    channel_id: str
    owner: str
    fence: int
    # The channel's failed attempts as the lock found them (None: the last round went well).
    attempts: Attempts | None = None
    # Whether the channel's last round left candidates waiting (botmemory.consolidation.candidates): a
    # round reads them only then.
    candidates: bool = False
    # What the channel's last committed round still owes of its people (the JSON of
    # botmemory.storage.round_people.RoundPeople); None: nothing.
    people_due: str | None = None


@dataclass(frozen=True)
class LockRefused:
    """The lock was not taken: another run holds it, or the channel backs off after a
    failure until `retry_at_ms`."""

    retry_at_ms: int | None = None


@dataclass(frozen=True)
class NameSeen:
    """A display name of the scope's name registry, and the members seen using it."""

    scope: str
    normalized: str
    name: str
    user_ids: tuple[str, ...]


@dataclass(frozen=True)
class PersonaMember:
    """A person a persona keeps memories of (persona_user facts), marked in the persona's
    scope so that a purge of the persona finds them without a scan; `user_id` puts the marker
    in the by_user index, so the person's erasure deletes it."""

    scope: str  # the persona's (keys.persona_scope)
    user_id: str
    lineage_id: str

    @classmethod
    def of(cls, fact: Fact) -> PersonaMember | None:
        """The marker a fact needs: one for a persona_user fact, none for any other."""
        if fact.memory_scope != MemoryScope.PERSONA_USER or fact.lineage_id is None:
            return None
        return cls(fact.scope, fact.user_id, fact.lineage_id)

    def put(self) -> dict[str, Any]:
        """Idempotent: the same person marked again is the same item."""
        values = {
            "pk": keys.scope_pk(self.scope),
            "sk": f"{PERSONA_MEMBER_PREFIX}{self.user_id}",
            "scope": self.scope,
            "user_id": self.user_id,
            "lineage_id": self.lineage_id,
        }
        return {"Item": to_item(values)}


def newest_evidence_ms(fact: Fact) -> int:
    """When the newest observation a fact rests on was said (its key holds the time)."""
    times = [parts[0] for sk in fact.provenance if (parts := keys.observation_parts(sk))]
    return max(times) if times else fact.updated_ms


class CommitRejected(Exception):
    """The transaction's conditions failed: the lock was lost or an input was already consumed."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__(", ".join(reasons) or "transaction cancelled")
        self.reasons = reasons


@dataclass
class ConsolidationCommit:
    """Everything one consolidation writes, applied atomically."""

    lock: Lock
    scope: str
    consumed: Sequence[Observation]
    now_ms: int
    facts: Sequence[Fact] = ()
    superseded: Sequence[Fact] = ()
    episode: Episode | None = None
    dropped_episodes: Sequence[str] = ()  # episode sort keys beyond the cap
    # The channel's new rolling summary, written only if the stored one is still the one
    # the model rewrote (`summary_replaces`: its id, None when there was none): a reset or an
    # erasure that deleted it meanwhile cancels the commit. The replaced one is archived.
    summary: ChannelSummary | None = None
    summary_replaces: str | None = None
    archived_summary: ChannelSummary | None = None
    # The stored summary (`summary_replaces`) covers a message deleted since: it goes, never
    # archived, replaced by `summary` (built without it) or, with none, deleted, on the same
    # condition that it is still the one read.
    summary_dropped: bool = False
    more_pending_since_ms: int | None = None  # oldest observation left pending, if any
    # People seen in the batch: (scope, user id, display name), and the name registry's new
    # entries (`names`): not actions of the transaction; the lock release records them on the
    # channel's state (`people_due`, their JSON, botmemory.storage.round_people) until they
    # are written after it.
    people: Sequence[tuple[str, str, str]] = ()
    people_due: str | None = None
    # Observations of people who opted out: deleted instead of consumed.
    discarded: Sequence[Observation] = ()
    # A batch that kept failing: consumed without facts, recorded here.
    quarantine: Quarantine | None = None
    # The channel's failure record after this round; None clears it.
    attempts: Attempts | None = None
    # Person hashes of everyone the commit writes anything of (fact subjects, the authors of a
    # persona knowledge's evidence, profiles, episode participants, people named): their
    # ERASED marker and OPTOUT item must not exist.
    guarded: Sequence[str] = ()
    # The persona's member marker of each person a persona_user fact is written of.
    members: Sequence[PersonaMember] = ()
    # Name registry entries that learn a member (new names, or new members of a name).
    names: Sequence[NameSeen] = ()  # written after the commit, as `people` are
    # Pointers to the batch's observations and the episode, under each person they name.
    named: Sequence[Named] = ()
    # Pointers beyond the transaction's room: written once it succeeded (not counted).
    named_later: Sequence[Named] = ()
    # Consumed observations whose stored text loses a barred person's mention: sk -> text.
    redacted: Mapping[str, str] = field(default_factory=dict)
    # Consumed observations -> the search passages that copy their words (botmemory.search.passages),
    # stored on each so that its deletion or rewrite names the passages to remove.
    holders: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # The history entries of the facts written and superseded (botmemory.memory.fact_history), one
    # action each, in the transaction while there is room after the facts: an entry holds the
    # fact's text, and here the erasure and opt-out checks above cover it as they cover the
    # fact (an erasure that lands while the model thinks cancels both), and the change is
    # never kept without its entry. Budgeting a third action per fact would cost a full
    # batch a third of its facts; so entries beyond the room (`history_later`, not counted)
    # are written right after the commit in one batch, for people not barred by then, as
    # the Named pointers beyond it are.
    history: Sequence[FactHistory] = ()
    history_later: Sequence[FactHistory] = ()
    # Deferred candidates (botmemory.consolidation.candidates): written (those in `candidates_rewritten`,
    # sort keys, only while they still exist: an erasure meanwhile is not undone) and
    # deleted (sort keys, under the channel), one action each.
    candidate_puts: Sequence[Candidate] = ()
    candidates_rewritten: frozenset[str] = frozenset()
    candidate_deletes: Sequence[str] = ()
    # Whether candidates wait after this commit, as the channel's state records it for the
    # next round's lock (None: this commit did not look at them, the record stays).
    candidates_left: bool | None = None
    # One run of a round over a backlog, not its last (botmemory.consolidation.backlog): the
    # commit is fenced by the lock as always, and keeps it for the next run.
    keep_lock: bool = False

    def action_count(self) -> int:
        return (
            len(self.consumed)
            + len(self.discarded)
            + len(self.facts)
            + len(self.superseded)
            + (1 if self.episode else 0)
            + (1 if self.summary or self._drops_summary else 0)
            + (1 if self.archived_summary else 0)
            + len(self.dropped_episodes)
            + (1 if self.quarantine else 0)
            + 1  # the channel state: lock release and sweep marker
            + 2 * len(self.guarded)  # erasure marker and opt-out, per person
            + len(self.facts)  # each fact's forget tombstone
            + len(self.members)  # a persona's member markers
            + len(self.named)
            + sum(len(history_puts(entry)) for entry in self.history)
            + len(self.candidate_puts)
            + len(self.candidate_deletes)
        )

    def room_left(self) -> int:
        """How many more actions this commit can take and still be one transaction."""
        return MAX_TRANSACTION_ACTIONS - self.action_count()

    def actions(self, table: str) -> list[dict[str, Any]]:
        """The transaction's actions, in the shape `TransactWriteItems` takes."""
        if self.room_left() < 0:
            raise ValueError(f"commit of {self.action_count()} actions exceeds one transaction")
        channel_id = self.lock.channel_id
        actions: list[dict[str, Any]] = [{"Update": _fact_upsert(f)} for f in self.facts]
        actions += [{"Put": member.put()} for member in self.members]
        actions += [{"Update": _supersede(f, self.now_ms)} for f in self.superseded]
        actions += [put for entry in self.history for put in history_puts(entry)]
        if self.episode:
            actions.append(
                {
                    "Put": {
                        "Item": to_item(episode_values(self.episode, self.scope)),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        actions += [
            {"Delete": {"Key": key(keys.channel_pk(channel_id), sk)}}
            for sk in self.dropped_episodes
        ]
        if self.summary:
            actions.append({"Put": self._summary_put(self.summary)})
        elif self._drops_summary:
            actions.append({"Delete": self._summary_delete()})
        if self.archived_summary:
            actions.append(
                {
                    "Put": {
                        "Item": to_item(episode_values(self.archived_summary, self.scope)),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        if self.quarantine:
            actions.append(
                {
                    "Put": {
                        "Item": to_item(quarantine_values(self.quarantine)),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        actions += [
            {"Update": _consume(channel_id, o, self.redacted.get(o.sk), self.holders.get(o.sk))}
            for o in self.consumed
        ]
        actions += [
            {
                "Delete": {
                    "Key": observation_key(channel_id, o.sk),
                    "ConditionExpression": "attribute_exists(pending_sk)",
                }
            }
            for o in self.discarded
        ]
        actions += [{"Put": {"Item": to_item(named_values(named))}} for named in self.named]
        actions += [{"Put": self._candidate_put(c)} for c in self.candidate_puts]
        actions += [
            {"Delete": {"Key": key(keys.channel_pk(channel_id), sk)}}
            for sk in self.candidate_deletes
        ]
        actions += self._guards()
        actions.append({"Update": self._release_and_record()})
        for action in actions:
            for request in action.values():
                request["TableName"] = table
        return actions

    def _candidate_put(self, candidate: Candidate) -> dict[str, Any]:
        put: dict[str, Any] = {"Item": to_item(candidate_values(candidate))}
        if keys.candidate_sk(candidate.fact.fact_id) in self.candidates_rewritten:
            put["ConditionExpression"] = "attribute_exists(pk)"
        return put

    def _summary_put(self, summary: ChannelSummary) -> dict[str, Any]:
        put: dict[str, Any] = {"Item": to_item(episode_values(summary, self.scope))}
        if self.summary_replaces is None:
            put["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            put["ConditionExpression"] = "episode_id = :replaces"
            put["ExpressionAttributeValues"] = {":replaces": {"S": self.summary_replaces}}
        return put

    @property
    def _drops_summary(self) -> bool:
        return self.summary_dropped and self.summary_replaces is not None

    def _summary_delete(self) -> dict[str, Any]:
        """The dropped summary, deleted only while it is the one read (gone already: fine)."""
        return {
            "Key": key(keys.channel_pk(self.lock.channel_id), keys.SUMMARY_SK),
            "ConditionExpression": "attribute_not_exists(pk) OR episode_id = :replaces",
            "ExpressionAttributeValues": {":replaces": {"S": str(self.summary_replaces)}},
        }

    def _guards(self) -> list[dict[str, Any]]:
        """The checks that make erasure, opt-out and forget win a race with this commit."""
        now_s = {":now": {"N": str(self.now_ms // 1000)}}
        checks: list[dict[str, Any]] = []
        for person in self.guarded:
            checks.append(
                {
                    "ConditionCheck": {
                        "Key": key(keys.ERASED_PK, person),
                        # A marker past its TTL that DynamoDB has not deleted yet bars no one.
                        "ConditionExpression": "attribute_not_exists(pk) OR expires_at <= :now",
                        "ExpressionAttributeValues": now_s,
                    }
                }
            )
            checks.append(
                {
                    "ConditionCheck": {
                        "Key": key(keys.OPT_OUT_PK, person),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        for fact in self.facts:
            checks.append(
                {
                    "ConditionCheck": {
                        "Key": forgotten_key(fact.scope, fact.user_id, fact.fact_id),
                        "ConditionExpression": (
                            "attribute_not_exists(pk) OR forgotten_ms < :newest"
                        ),
                        "ExpressionAttributeValues": {
                            ":newest": {"N": str(newest_evidence_ms(fact))}
                        },
                    }
                }
            )
        return checks

    def _release_and_record(self) -> dict[str, Any]:
        """Release the lock (only while still ours), count the round, write the channel's
        failure record and what it owes of its people, and keep the channel on the sweep's
        list when something is still waiting."""
        sets, removes, values = attempts_update(self.attempts)
        values.update(
            {
                ":owner": {"S": self.lock.owner},
                ":fence": {"N": str(self.lock.fence)},
                ":now": {"N": str(self.now_ms)},
                ":one": {"N": "1"},
                ":zero": {"N": "0"},
            }
        )
        sets = [
            "last_consolidated_ms = :now",
            "consolidations = if_not_exists(consolidations, :zero) + :one",
            *sets,
        ]
        removes = [*([] if self.keep_lock else ["lock_owner", "lease_until"]), *removes]
        if self.candidates_left is True:
            sets.append("candidates_waiting = :one")
        elif self.candidates_left is False:
            removes.append("candidates_waiting")
        if self.people_due:
            sets.append("people_due = :people_due")
            values[":people_due"] = {"S": self.people_due}
        else:
            removes.append("people_due")
        if self.more_pending_since_ms is None:
            removes += ["sweep_bucket", "pending_since"]
        else:
            sets += ["sweep_bucket = :bucket", "pending_since = :since"]
            values[":bucket"] = {"S": keys.SWEEP_BUCKET}
            values[":since"] = {"N": str(self.more_pending_since_ms)}
        update = f"SET {', '.join(sets)}" + (f" REMOVE {', '.join(removes)}" if removes else "")
        return {
            "Key": state_key(self.lock.channel_id),
            "UpdateExpression": update,
            "ConditionExpression": "lock_owner = :owner AND fence = :fence",
            "ExpressionAttributeValues": values,
        }


def _consume(
    channel_id: str,
    observation: Observation,
    redacted: str | None,
    passages: Sequence[str] | None,
) -> dict[str, Any]:
    """Take an observation out of the pending index, only if no one else has; its text
    loses the mention of someone barred when `redacted` says so, and it records the search
    passages that copy it."""
    sets: list[str] = []
    values: dict[str, Any] = {}
    if redacted is not None:
        sets.append("content = :content")
        values[":content"] = {"S": redacted}
    if passages:
        sets.append("passages = :passages")
        values[":passages"] = attribute(list(passages))
    update: dict[str, Any] = {
        "Key": observation_key(channel_id, observation.sk),
        "UpdateExpression": (f"SET {', '.join(sets)} " if sets else "") + "REMOVE pending_sk",
        "ConditionExpression": "attribute_exists(pending_sk)",
    }
    if values:
        update["ExpressionAttributeValues"] = values
    return update


def _supersede(fact: Fact, now_ms: int) -> dict[str, Any]:
    """Keep a fact for staff, out of the active index."""
    return {
        "Key": fact_key(fact),
        "UpdateExpression": "SET #status = :superseded, updated_ms = :now REMOVE fact_rank",
        "ConditionExpression": "attribute_exists(pk)",
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {
            ":superseded": {"S": FactStatus.SUPERSEDED.value},
            ":now": {"N": str(now_ms)},
        },
    }


def _fact_upsert(fact: Fact) -> dict[str, Any]:
    """Create a fact, or refresh the same fact restated: one more hit, newer timestamps."""
    values: dict[str, Any] = {
        ":user": fact.user_id,
        ":scope": fact.scope,
        ":id": fact.fact_id,
        ":text": fact.text,
        ":kind": fact.kind.value,
        ":source": fact.source.value,
        ":active": FactStatus.ACTIVE.value,
        ":provenance": fact.provenance,
        ":created": fact.created_ms,
        ":updated": fact.updated_ms,
        ":rank": keys.fact_rank(fact.updated_ms, fact.fact_id),
        ":expires": fact.expires_at,
        ":zero": 0,
        ":one": 1,
    }
    persona = ""
    if fact.memory_scope != MemoryScope.USER:  # a person's own facts are stored as they were
        values.update({":memory_scope": fact.memory_scope.value, ":lineage": fact.lineage_id})
        persona = ", memory_scope = :memory_scope, lineage_id = :lineage"
        # What this statement rests on, like its provenance: rewritten by each restatement.
        values[":evidence_users"] = list(fact.evidence_user_ids)
        persona += ", evidence_user_ids = :evidence_users"
    # Where it was said, added to where it was said before (botmemory.memory.visibility).
    added = []
    for name in FACT_CHANNEL_SETS:
        if channels := set(getattr(fact, name)):
            values[f":{name}"] = channels
            added.append(f"{name} :{name}")
    channels_added = " ADD " + ", ".join(added) if added else ""
    # When it was said (botmemory.when.facts): the plan merged them with the stored fact's.
    said = ""
    for name in ("first_said_ms", "last_said_ms", "valid_until_ms"):
        if (value := getattr(fact, name)) is not None:
            values[f":{name}"] = value
            said += f", {name} = :{name}"
    # A restatement without an end leaves none (its plan kept the stored one if newer).
    no_end = " REMOVE valid_until_ms" if fact.valid_until_ms is None else ""
    return {
        "Key": fact_key(fact),
        "UpdateExpression": (
            "SET user_id = :user, #scope = :scope, fact_id = :id, item_id = :id, #text = :text, "
            "#kind = :kind, #source = if_not_exists(#source, :source), #status = :active, "
            "provenance = :provenance, created_ms = if_not_exists(created_ms, :created), "
            "updated_ms = :updated, hits = if_not_exists(hits, :zero) + :one, "
            "fact_rank = :rank, expires_at = :expires" + persona + said + channels_added + no_end
        ),
        "ExpressionAttributeNames": {
            "#scope": "scope",
            "#text": "text",
            "#kind": "kind",
            "#source": "source",
            "#status": "status",
        },
        "ExpressionAttributeValues": {k: attribute(v) for k, v in values.items()},
    }


class CommitStore(Table):
    def commit_consolidation(self, commit: ConsolidationCommit) -> None:
        """Write facts and the episode, consume the observations and release the lock, atomically.

        Raises CommitRejected when the lock is no longer ours or an observation was
        already consumed: then nothing at all was written.
        """
        try:
            self._transact(commit.actions(self.table_name))
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            reasons = [
                r.get("Code", "")
                for r in exc.response.get("CancellationReasons", [])
                if r.get("Code") not in (None, "", "None")
            ]
            raise CommitRejected(reasons) from exc

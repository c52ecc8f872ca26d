"""Observations from raw gateway dispatch events: one conditional PutItem each.

No reads and no model call happen here. The item key is built from Discord's ids
and timestamps alone, so an event delivered twice is stored once.

An observation's time is the snowflake time of the message it is about (a snowflake
carries when it was made), never a timestamp the payload claims: a message's key is
computable from its id alone, and its delete's key shares its millisecond. Only an edit
uses its payload's `edited_timestamp`, clamped between the message's own time and a few
minutes from now. An id whose time lies beyond that is rejected.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from botmemory.catchup.on_join import JoinBackfills
from botmemory.clock import DAY_MS, Clock, epoch_seconds
from botmemory.ingest.channels import GUILD_CREATE, GUILD_DELETE, GUILD_EVENTS, ChannelVisibility
from botmemory.ingest.lifecycle import LIFECYCLE_EVENTS, LifecycleEvents
from botmemory.people.controls import RecordingGate
from botmemory.people.optout import OptOuts
from botmemory.people.retention import Kept, Retention
from botmemory.people.server_removal import guild_back, guild_removed
from botmemory.records import Observation, ObservationKind, scope_of
from botmemory.settings.config import Settings
from botmemory.snowflake import Snowflake, snowflake_ms
from botmemory.storage.keys import observation_sk, server_scope_of
from botmemory.storage.repository import MemoryRepository
from botmemory.text import clean, content_hash
from botmemory.when.window import FUTURE_TOLERANCE_MS

log = logging.getLogger(__name__)

# Discord caps content at 4,000 characters; anything far beyond is not a real message.
MAX_CONTENT_CHARS = 16_000
# Discord allows 250 roles per guild: a member cannot hold more.
MAX_MEMBER_ROLES = 250
# Discord allows 10 attachments per message.
MAX_ATTACHMENTS = 10
# What someone says (botmemory.people.controls decides whether it may be kept); deletions and
# reaction clears are always kept, as they make what was kept before go.
SAID = frozenset(
    {
        ObservationKind.MESSAGE,
        ObservationKind.ANSWER,
        ObservationKind.EDIT,
        ObservationKind.REACTION_ADD,
        ObservationKind.REACTION_REMOVE,
    }
)

Name = Annotated[str, StringConstraints(max_length=200)]


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore")


class User(_Payload):
    id: Snowflake
    username: Name = ""
    global_name: Name | None = None
    bot: bool = False


class Member(_Payload):
    nick: Name | None = None
    user: User | None = None
    # Role ids: whether the author is staff is decided from them (records.GuildStaff).
    roles: list[Snowflake] = Field(default=[], max_length=MAX_MEMBER_ROLES)


class MessageReference(_Payload):
    message_id: Snowflake | None = None


class Emoji(_Payload):
    id: Snowflake | None = None
    name: Name | None = None

    def key(self) -> str:
        return self.id or self.name or "?"

    def label(self) -> str:
        return f":{self.name}:" if self.id else (self.name or "?")


class Attachment(_Payload):
    content_type: str | None = Field(default=None, max_length=200)
    # Alt text (Discord caps it at 1,024 characters): the words the member gave the file.
    description: str | None = Field(default=None, max_length=MAX_CONTENT_CHARS)


def with_alt_text(content: str, attachments: Sequence[Attachment]) -> str:
    """The message's words, then the alt text of each attachment that has one, as
    "[image: …]" (or "[file: …]"): what the member said of a picture is remembered and
    found like the rest of the message, and goes with it."""
    parts = [content] if content.strip() else []
    for attachment in attachments:
        text = " ".join((attachment.description or "").split())
        if text:
            image = (attachment.content_type or "").startswith("image/")
            parts.append(f"[{'image' if image else 'file'}: {text}]")
    return " ".join(parts)


class MessageCreate(_Payload):
    id: Snowflake
    channel_id: Snowflake
    guild_id: Snowflake | None = None
    author: User
    member: Member | None = None
    content: str = Field(default="", max_length=MAX_CONTENT_CHARS)
    # Discord always sends it, so one that is missing or unreadable marks a broken payload;
    # the message's time is its id's, never this claim.
    timestamp: datetime
    message_reference: MessageReference | None = None
    attachments: list[Attachment] = Field(default=[], max_length=MAX_ATTACHMENTS)


class MessageUpdate(_Payload):
    # MESSAGE_UPDATE may be partial: only id and channel_id are certain.
    id: Snowflake
    channel_id: Snowflake
    guild_id: Snowflake | None = None
    author: User | None = None
    member: Member | None = None
    content: str | None = Field(default=None, max_length=MAX_CONTENT_CHARS)
    edited_timestamp: datetime | None = None
    # A partial update may leave them out: then only the new words are kept.
    attachments: list[Attachment] | None = Field(default=None, max_length=MAX_ATTACHMENTS)


class MessageDelete(_Payload):
    id: Snowflake
    channel_id: Snowflake
    guild_id: Snowflake | None = None


class MessageDeleteBulk(_Payload):
    ids: list[Snowflake] = Field(min_length=1, max_length=200)
    channel_id: Snowflake
    guild_id: Snowflake | None = None


class ReactionChange(_Payload):
    user_id: Snowflake
    channel_id: Snowflake
    message_id: Snowflake
    guild_id: Snowflake | None = None
    emoji: Emoji
    member: Member | None = None


class ReactionRemoveAll(_Payload):
    channel_id: Snowflake
    message_id: Snowflake
    guild_id: Snowflake | None = None


class ReactionRemoveEmoji(_Payload):
    channel_id: Snowflake
    message_id: Snowflake
    guild_id: Snowflake | None = None
    emoji: Emoji


class GuildDelete(_Payload):
    id: Snowflake
    unavailable: bool = False


class Skip(BaseModel):
    index: int
    event: str
    reason: str


class IngestResult(BaseModel):
    stored: int = 0
    # Visibility and staff items written or deleted (guild events, botmemory.ingest.channels).
    channels: int = 0
    duplicates: int = 0
    # Backfills the bot's joining a server started (botmemory.catchup.on_join): a metric.
    backfills: int = Field(default=0, exclude=True)
    joined_at_missing: int = Field(default=0, exclude=True)  # GUILD_CREATEs without it
    ignored: list[Skip] = []
    rejected: list[Skip] = []
    # Events seen before (a relay resending a batch): nothing about them happens again.
    duplicate_indexes: list[int] = Field(default=[], exclude=True)


def events_from(envelope: Any) -> list[Any]:
    """The events of an ingest request `{"events": [...]}`; ValueError when it has none."""
    if not isinstance(envelope, dict) or not isinstance(envelope.get("events"), list):
        raise ValueError('expected a JSON object {"events": [...]}')
    events: list[Any] = envelope["events"]
    return events


class Ignored(Exception):
    """A well-formed event that holds nothing worth remembering."""


def _clamped_ms(moment: datetime, earliest_ms: int, latest_ms: int) -> int:
    """A payload's timestamp in epoch milliseconds, brought within [earliest, latest]."""
    if moment.tzinfo is None:  # read as UTC: a naive time would otherwise be local time
        moment = moment.replace(tzinfo=UTC)
    return min(max(int(moment.timestamp() * 1000), earliest_ms), latest_ms)


def _display_name(user: User | None, member: Member | None) -> str | None:
    if member and member.nick:
        return member.nick
    if user is None:
        return None
    return user.global_name or user.username or user.id


def _all_names(user: User | None, member: Member | None) -> list[str]:
    """Every name the author goes by (nickname, global name, account name): each of them
    names the member, not the display name alone."""
    names = [member.nick if member else None]
    if user is not None:
        names += [user.global_name, user.username]
    return list(dict.fromkeys(n for n in names if n and n.strip()))


class ObservationRecorder:
    """Turns dispatch events into observation items."""

    def __init__(
        self, repository: MemoryRepository, settings: Settings, clock: Clock, opt_outs: OptOuts
    ) -> None:
        self._repository = repository
        self._settings = settings
        self._clock = clock
        self._opt_outs = opt_outs
        self._channels = ChannelVisibility(repository)
        # Channel switches, consent and pauses (botmemory.people.controls); the answer path
        # asks it too, for its short-term line.
        self.gate = RecordingGate(repository, clock, lambda person: self._opt_outs.hash_of(person))
        self._lifecycle_events = LifecycleEvents(repository, settings, clock, self.gate)
        self._joins = JoinBackfills(repository, settings, clock)
        self._parsers: dict[str, Callable[[dict[str, Any]], Observation]] = {
            "MESSAGE_CREATE": self._message_create,
            "MESSAGE_UPDATE": self._message_update,
            "MESSAGE_DELETE": self._message_delete,
            "MESSAGE_DELETE_BULK": self._message_delete_bulk,
            "MESSAGE_REACTION_ADD": self._reaction_add,
            "MESSAGE_REACTION_REMOVE": self._reaction_remove,
            "MESSAGE_REACTION_REMOVE_ALL": self._reaction_remove_all,
            "MESSAGE_REACTION_REMOVE_EMOJI": self._reaction_remove_emoji,
        }

    def record(self, events: list[Any], ingest_id: str | None = None) -> IngestResult:
        """Store each event that parses; skip the rest with a reason. Never raises for one event.
        `ingest_id` (the invocation's correlation id) is kept on each observation."""
        result = IngestResult()
        for index, event in enumerate(events):
            name = event.get("t") if isinstance(event, dict) else None
            label = name if isinstance(name, str) else "?"
            if not self._settings.memory_enabled:
                result.ignored.append(Skip(index=index, event=label, reason="memory is off"))
                continue
            if label in GUILD_EVENTS or label in LIFECYCLE_EVENTS:
                self._record_channel_event(index, label, event, result)
                continue
            try:
                observation = self.parse(event)
            except Ignored as why:
                result.ignored.append(Skip(index=index, event=label, reason=str(why)))
                continue
            except (ValueError, TypeError) as why:
                _reject(result, index, label, why)
                continue
            if self._opt_outs.is_opted_out(observation.author_id):
                result.ignored.append(Skip(index=index, event=label, reason="author opted out"))
                continue
            refusal = self._refusal(observation, event)
            if refusal is not None:
                result.ignored.append(Skip(index=index, event=label, reason=refusal))
                continue
            if self._repository.put_observation(self._stamped(observation, ingest_id)):
                result.stored += 1
            else:
                result.duplicates += 1
                result.duplicate_indexes.append(index)
        return result

    def _stamped(self, observation: Observation, ingest_id: str | None) -> Observation:
        """As stored: the ingest invocation's id, the server's expiry."""
        update = self._server_expiry(observation)
        if ingest_id:
            update["ingest_id"] = ingest_id[:64]
        return observation.model_copy(update=update) if update else observation

    def _server_expiry(self, observation: Observation) -> dict[str, Any]:
        """The expiry of a server's retention, where its staff shortened it (read with its
        other controls, cached; botmemory.people.retention)."""
        server = server_scope_of(observation.scope)
        if server == scope_of(None):
            return {}
        chosen = self.gate.controls(server).retention
        if Kept.MESSAGES.value not in chosen:
            return {}
        days = Retention.of(self._settings, chosen).days(Kept.MESSAGES)
        expires_at = epoch_seconds(self._clock.now_ms() + days * DAY_MS)
        if observation.expires_at is not None and observation.expires_at <= expires_at:
            return {}
        return {"expires_at": expires_at}

    def _refusal(self, observation: Observation, event: dict[str, Any]) -> str | None:
        """Why this observation may not be kept (botmemory.people.controls); None when it may.
        The bot's answer is kept as the words of the member it answers would be."""
        if observation.kind not in SAID:
            return None
        person = observation.author_id
        if observation.kind == ObservationKind.ANSWER:
            person = answered_member(_payload_of(event))
        guild = None if observation.scope == scope_of(None) else observation.scope
        return self.gate.refusal(guild, observation.channel_id, person)

    def _record_channel_event(
        self, index: int, label: str, event: dict[str, Any], result: IngestResult
    ) -> None:
        """A guild, role, channel or thread event updates visibility or staff; no observation.
        A guild removed schedules its purge, a guild back cancels it."""
        if label in LIFECYCLE_EVENTS:
            self._lifecycle(index, label, event, result)
            return
        try:
            if label == GUILD_DELETE:
                self._guild_delete(index, label, event, result)
                return
            change = self._channels.apply(label, _payload_of(event))
            if label == GUILD_CREATE and isinstance(event["d"].get("id"), str):
                # After its channels are recorded: a join's backfill reads them. An
                # unavailable guild (an outage) is no join.
                joined = self._joins.guild_created(
                    event["d"]["id"], event["d"], available=not change.ignored
                )
                guild_back(
                    self._repository, event["d"]["id"], self._clock.now_ms(), joined.record_ms
                )
                result.backfills += joined.started
                result.joined_at_missing += joined.missing
                if joined.skip:
                    result.ignored.append(Skip(index=index, event=label, reason=joined.skip))
        except (ValueError, TypeError) as why:
            _reject(result, index, label, why)
            return
        if change.ignored:
            result.ignored.append(Skip(index=index, event=label, reason=change.ignored))
        result.channels += change.items

    def _lifecycle(
        self, index: int, label: str, event: dict[str, Any], result: IngestResult
    ) -> None:
        """A shard's READY, a member who left (botmemory.ingest.lifecycle)."""
        try:
            done, why = self._lifecycle_events.record(label, _payload_of(event))
        except (ValueError, TypeError) as error:
            _reject(result, index, label, error)
            return
        if why is not None:
            result.ignored.append(Skip(index=index, event=label, reason=why))
        result.channels += done

    def _guild_delete(
        self, index: int, label: str, event: dict[str, Any], result: IngestResult
    ) -> None:
        removed = GuildDelete.model_validate(_payload_of(event))
        why = guild_removed(
            self._repository,
            removed.id,
            unavailable=removed.unavailable,
            now_ms=self._clock.now_ms(),
            days=self._settings.server_purge_days,
        )
        if why is not None:
            result.ignored.append(Skip(index=index, event=label, reason=why))
        else:
            result.channels += 1

    def parse(self, event: Any) -> Observation:
        if not isinstance(event, dict):
            raise ValueError("event is not an object")
        name = event.get("t")
        if not isinstance(name, str):
            raise ValueError("event has no name (t)")
        parser = self._parsers.get(name)
        if parser is None:
            raise ValueError(f"unsupported event type {name[:60]!r}")
        return parser(_payload_of(event))

    # One parser per dispatch type.

    def _time_of(self, snowflake: str) -> int:
        """When a snowflake was made; ValueError when that lies too far ahead of the clock."""
        at_ms = snowflake_ms(snowflake)
        if at_ms > self._clock.now_ms() + FUTURE_TOLERANCE_MS:
            made = datetime.fromtimestamp(at_ms / 1000, tz=UTC).isoformat(timespec="seconds")
            raise ValueError(
                f"id {snowflake} dates from {made}, more than "
                f"{FUTURE_TOLERANCE_MS // 60_000} minutes from now: not a Discord id"
            )
        return at_ms

    def _observation(self, **fields: Any) -> Observation:
        retention_ms = self._settings.observation_retention_days * DAY_MS
        fields["content"] = clean(fields.get("content") or "", self._settings.observation_chars)
        if fields.get("author_name"):
            fields["author_name"] = clean(fields["author_name"], 80)
        if fields.get("author_names"):
            cleaned = (clean(name, 80) for name in fields["author_names"])
            fields["author_names"] = list(dict.fromkeys(n for n in cleaned if n))
        return Observation(
            expires_at=epoch_seconds(self._clock.now_ms() + retention_ms),
            **fields,
        )

    def _message_create(self, payload: dict[str, Any]) -> Observation:
        msg = MessageCreate.model_validate(payload)
        is_answer = bool(self._settings.bot_user_id) and msg.author.id == self._settings.bot_user_id
        kind = ObservationKind.ANSWER if is_answer else ObservationKind.MESSAGE
        at_ms = self._time_of(msg.id)
        return self._observation(
            channel_id=msg.channel_id,
            scope=scope_of(msg.guild_id),
            sk=observation_sk(at_ms, kind, msg.id),
            kind=kind,
            at_ms=at_ms,
            author_id=msg.author.id,
            author_name=_display_name(msg.author, msg.member),
            author_names=_all_names(msg.author, msg.member),
            author_is_bot=msg.author.bot,
            author_roles=msg.member.roles if msg.member else [],
            message_id=msg.id,
            content=with_alt_text(msg.content, msg.attachments),
            reply_to=msg.message_reference.message_id if msg.message_reference else None,
        )

    def _message_update(self, payload: dict[str, Any]) -> Observation:
        msg = MessageUpdate.model_validate(payload)
        if msg.content is None or msg.edited_timestamp is None:
            raise Ignored("update without new content (embed or flag change)")
        if msg.author is None:
            raise Ignored("partial update without its author")
        # Never before the message itself, nor later than Discord could have sent it.
        at_ms = _clamped_ms(
            msg.edited_timestamp,
            self._time_of(msg.id),
            self._clock.now_ms() + FUTURE_TOLERANCE_MS,
        )
        return self._observation(
            channel_id=msg.channel_id,
            scope=scope_of(msg.guild_id),
            sk=observation_sk(at_ms, ObservationKind.EDIT, msg.id),
            kind=ObservationKind.EDIT,
            at_ms=at_ms,
            author_id=msg.author.id,
            author_name=_display_name(msg.author, msg.member),
            author_names=_all_names(msg.author, msg.member),
            author_is_bot=msg.author.bot,
            author_roles=msg.member.roles if msg.member else [],
            message_id=msg.id,
            content=with_alt_text(msg.content, msg.attachments or []),
        )

    def _message_delete(self, payload: dict[str, Any]) -> Observation:
        msg = MessageDelete.model_validate(payload)
        at_ms = self._time_of(msg.id)
        return self._observation(
            channel_id=msg.channel_id,
            scope=scope_of(msg.guild_id),
            sk=observation_sk(at_ms, ObservationKind.DELETE, msg.id),
            kind=ObservationKind.DELETE,
            at_ms=at_ms,
            message_id=msg.id,
        )

    def _message_delete_bulk(self, payload: dict[str, Any]) -> Observation:
        msg = MessageDeleteBulk.model_validate(payload)
        ids = sorted(set(msg.ids), key=int)
        at_ms = self._time_of(ids[-1])
        batch_key = content_hash(*ids)[:12]
        return self._observation(
            channel_id=msg.channel_id,
            scope=scope_of(msg.guild_id),
            sk=observation_sk(at_ms, ObservationKind.BULK_DELETE, ids[-1], batch_key),
            kind=ObservationKind.BULK_DELETE,
            at_ms=at_ms,
            message_ids=ids,
        )

    def _reaction(self, payload: dict[str, Any], kind: ObservationKind) -> Observation:
        reaction = ReactionChange.model_validate(payload)
        # Reactions carry no timestamp; the reacted message's time keeps the key deterministic.
        at_ms = self._time_of(reaction.message_id)
        member_user = reaction.member.user if reaction.member else None
        return self._observation(
            channel_id=reaction.channel_id,
            scope=scope_of(reaction.guild_id),
            sk=observation_sk(
                at_ms, kind, reaction.message_id, reaction.user_id, reaction.emoji.key()
            ),
            kind=kind,
            at_ms=at_ms,
            author_id=reaction.user_id,
            author_name=_display_name(member_user, reaction.member),
            author_names=_all_names(member_user, reaction.member),
            author_is_bot=bool(member_user and member_user.bot),
            message_id=reaction.message_id,
            emoji=reaction.emoji.label(),
        )

    def _reaction_add(self, payload: dict[str, Any]) -> Observation:
        return self._reaction(payload, ObservationKind.REACTION_ADD)

    def _reaction_remove(self, payload: dict[str, Any]) -> Observation:
        return self._reaction(payload, ObservationKind.REACTION_REMOVE)

    def _reaction_remove_all(self, payload: dict[str, Any]) -> Observation:
        event = ReactionRemoveAll.model_validate(payload)
        at_ms = self._time_of(event.message_id)
        return self._observation(
            channel_id=event.channel_id,
            scope=scope_of(event.guild_id),
            sk=observation_sk(at_ms, ObservationKind.REACTION_CLEAR, event.message_id),
            kind=ObservationKind.REACTION_CLEAR,
            at_ms=at_ms,
            message_id=event.message_id,
        )

    def _reaction_remove_emoji(self, payload: dict[str, Any]) -> Observation:
        event = ReactionRemoveEmoji.model_validate(payload)
        at_ms = self._time_of(event.message_id)
        return self._observation(
            channel_id=event.channel_id,
            scope=scope_of(event.guild_id),
            sk=observation_sk(
                at_ms, ObservationKind.REACTION_CLEAR_EMOJI, event.message_id, event.emoji.key()
            ),
            kind=ObservationKind.REACTION_CLEAR_EMOJI,
            at_ms=at_ms,
            message_id=event.message_id,
            emoji=event.emoji.label(),
        )


def answered_member(payload: dict[str, Any]) -> str | None:
    """Whom a message of the bot answers: the author of the message it replies to, or the
    member whose command it answers (`interaction_metadata`); None when it does not say."""
    for holder, field in (("referenced_message", "author"), ("interaction_metadata", "user")):
        outer = payload.get(holder)
        person = outer.get(field) if isinstance(outer, dict) else None
        person_id = person.get("id") if isinstance(person, dict) else None
        if isinstance(person_id, str) and person_id.isdigit():
            return person_id
    return None


def _payload_of(event: dict[str, Any]) -> dict[str, Any]:
    """An event's payload object (d); ValueError when it is missing or not valid UTF-8."""
    payload = event.get("d")
    if not isinstance(payload, dict):
        raise ValueError("event has no payload object (d)")
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("payload holds text that is not valid UTF-8 (a lone surrogate)") from None
    return payload


def _reject(result: IngestResult, index: int, label: str, why: Exception) -> None:
    reason = _reason(why)
    log.warning("rejected gateway event", extra={"index": index, "event": label, "reason": reason})
    result.rejected.append(Skip(index=index, event=label, reason=reason))


def _reason(error: Exception) -> str:
    if isinstance(error, ValidationError):
        parts = []
        for detail in error.errors()[:3]:
            where = ".".join(str(p) for p in detail["loc"]) or "payload"
            parts.append(f"{where}: {detail['msg']}")
        return "; ".join(parts)
    return str(error)[:300]

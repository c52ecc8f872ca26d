"""Catching up on a gap the relay could not receive (a session Discord would not resume):
what was said meanwhile is read back through Discord's REST API into the same ingest path
live events take (botmemory.ingest.observe), where every message is stored once by its id.

Three steps, each a small unit of work (CatchUpFunction):

1. `plan` (on a schedule): each gap the relay recorded (RELAY/GAP#, with its shard's guilds)
   is claimed once and becomes one task per guild.
2. `guild`: the guild's channels the table knows (its visibility items, by key) that hold an
   observation from the day before the gap to its end: the active ones. One page task each.
3. `page`: one `GET /channels/{id}/messages?after=` (100 messages), from the day before the
   gap on. A message made in the gap is a MESSAGE_CREATE with its current text (an edit
   made in the gap arrives that way); an older one edited since the gap began is a
   MESSAGE_UPDATE; a message the table holds over the stretch the page covers that Discord
   no longer has is a MESSAGE_DELETE (deleted means gone, through the delete path). The
   next page is a new task, delayed by the wait the route's rate-limit headers announce.

What REST cannot show is not recovered: reactions added or removed in the gap, and a
message made and deleted within it (never seen, so nothing to forget). No answer is
started for a mention found this way: it is old news by then. A channel the bot can no
longer read (403, 404) is skipped and counted. Rate limits: the queue's event source runs
at most two workers (MaximumConcurrency), each sending one request a message; a 429 puts
the task back, delayed by its retry_after, never retried at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botmemory.catchup.tasks import MAX_PAGES, BadTask, CatchUpTask, TaskQueue
from botmemory.clock import DAY_MS, Clock
from botmemory.discord.errors import DiscordApiError
from botmemory.discord.history import PAGE_LIMIT, HistoryApi
from botmemory.ingest.observe import ObservationRecorder
from botmemory.snowflake import snowflake_at, snowflake_ms
from botmemory.storage.catchup import CatchUpStore, Gap

log = logging.getLogger(__name__)

# The day before a gap is read again: edits made in the gap to older messages, and older
# messages deleted in it.
RECONCILE_MS = DAY_MS
# Gaps planned per scheduled run; the rest wait for the next run.
PLAN_GAPS = 20
# A channel's pages per gap (20,000 messages): a gap longer than a busy channel's day
# does not read forever.
PAGES_PER_CHANNEL = min(200, MAX_PAGES)
_GONE = (403, 404)  # no access any more, or no channel: skipped, counted


@dataclass
class PageDone:
    """What one task did, for the handler's metrics."""

    stored: int = 0
    deleted: int = 0
    edited: int = 0
    skipped: int = 0
    later: int = 0  # tasks put back (rate limited)
    sent: int = 0  # tasks sent on (guilds, channels, next pages)
    counts: dict[str, int] = field(default_factory=dict)


class CatchUp:
    """The three steps; `history` builds the REST client on first use (only pages need it)."""

    def __init__(
        self,
        recorder: ObservationRecorder,
        store: CatchUpStore,
        queue: TaskQueue,
        history: Callable[[], HistoryApi],
        clock: Clock,
        hash_of: Callable[[str], str],
    ) -> None:
        self._hash_of = hash_of
        self._recorder = recorder
        self._store = store
        self._queue = queue
        self._history = history
        self._clock = clock

    def plan(self) -> int:
        """Claim the gaps waiting and hand out their guilds; the number of gaps planned."""
        planned = 0
        for gap in self._store.gaps_waiting(PLAN_GAPS):
            # Sent before the claim: a run that dies between the two only repeats work
            # that is stored by id, while the reverse could lose a gap.
            self._queue.send(_guild_tasks(gap))
            if self._store.claim_gap(gap.sk, self._clock.now_ms()):
                planned += 1
                log.info(
                    "gap planned",
                    extra={"gap": gap.sk, "shard": gap.shard_id, "guilds": len(gap.guild_ids)},
                )
        return planned

    def run(self, task: CatchUpTask, ingest_id: str | None = None) -> PageDone:
        if task.kind == "guild":
            return self._guild(task)
        if task.kind == "backfill":
            return self._backfill(task, ingest_id)
        return self._page(task, ingest_id)

    def _guild(self, task: CatchUpTask) -> PageDone:
        since = task.from_ms - RECONCILE_MS
        active = [
            channel
            for channel in self._store.guild_channel_ids(task.guild_id)
            if self._store.channel_active(channel, since, task.to_ms)
        ]
        first = snowflake_at(since)
        pages = [
            task.model_copy(update={"kind": "page", "channel_id": c, "after": first, "page": 0})
            for c in active
        ]
        done = PageDone(sent=self._queue.send(pages))
        self._store.count(task.gap, channels=len(active))
        return done

    def _page(self, task: CatchUpTask, ingest_id: str | None) -> PageDone:
        if task.channel_id is None or task.after is None:
            raise BadTask("a page task names its channel and where it starts")
        history = self._history()
        try:
            messages = history.channel_messages(task.channel_id, task.after)
        except DiscordApiError as error:
            return self._refused(task, error)
        # The bucket's wait as its answer announced it, before this page's work uses time.
        wait = history.wait_before(task.channel_id)
        full = len(messages) == PAGE_LIMIT
        last = messages[-1]["id"] if full else None
        said = self._not_erased(self._said(task, messages))
        events = said + self._gone(task, task.after, messages, last)
        result = self._recorder.record(events, ingest_id=ingest_id)
        kinds = [str(e["t"]) for e in events]
        done = PageDone(
            stored=result.stored,
            deleted=kinds.count("MESSAGE_DELETE"),
            edited=kinds.count("MESSAGE_UPDATE"),
        )
        done.counts = {
            "pages": 1,
            "stored": result.stored,
            "deleted": done.deleted,
            "edited": done.edited,
        }
        self._store.count(task.gap, **done.counts)
        more = last is not None and snowflake_ms(last) <= task.to_ms
        if more and last is not None and task.page + 1 < PAGES_PER_CHANNEL:
            following = task.model_copy(update={"after": last, "page": task.page + 1})
            done.sent = self._queue.send([following], wait)
        elif more:
            log.warning(
                "channel's catch-up stopped at its page cap",
                extra={"gap": task.gap, "channel_id": task.channel_id, "pages": task.page + 1},
            )
        return done

    def _backfill(self, task: CatchUpTask, ingest_id: str | None) -> PageDone:
        """One page of a server's backfill run, unless the run was cancelled, ended or
        replaced (the chain of its pages stops there)."""
        guild, run_ms, channel, after = task.guild_id, task.run, task.channel_id, task.after
        if run_ms is None or channel is None or after is None:
            raise BadTask("a backfill task names its run, channel and start")
        run = self._store.backfill_run(guild)
        if run is None or run.run_ms != run_ms or not run.running:
            return PageDone()
        history = self._history()
        try:
            messages = history.channel_messages(channel, after)
        except DiscordApiError as error:
            if error.status in _GONE:
                self._channel_done(guild, run_ms, skipped=1)
                return PageDone(skipped=1)
            return self._refused(task, error)
        wait = history.wait_before(channel)
        made = [m for m in messages if task.from_ms <= snowflake_ms(m["id"]) <= task.to_ms]
        events = [
            {"t": "MESSAGE_CREATE", "d": {**m, "guild_id": guild, "channel_id": channel}}
            for m in made[: max(run.cap - run.messages, 0)]
        ]
        result = self._recorder.record(self._not_erased(events), ingest_id=ingest_id)
        now = self._store.count_backfill(guild, run_ms, messages=result.stored, pages=1)
        done = PageDone(stored=result.stored)
        if now is None:
            return done  # cancelled meanwhile
        if now.messages >= now.cap:
            self._store.end_backfill(guild, run_ms, "capped")
            return done
        last = messages[-1]["id"] if len(messages) == PAGE_LIMIT else None
        if last is not None and snowflake_ms(last) <= task.to_ms and task.page + 1 < MAX_PAGES:
            following = task.model_copy(update={"after": last, "page": task.page + 1})
            done.sent = self._queue.send([following], wait)
        else:
            self._channel_done(guild, run_ms)
        return done

    def _channel_done(self, guild: str, run_ms: int, skipped: int = 0) -> None:
        now = self._store.count_backfill(guild, run_ms, channels_done=1, skipped=skipped)
        if now is not None and now.channels_done >= now.channels:
            self._store.end_backfill(guild, run_ms, "done")

    def _refused(self, task: CatchUpTask, error: DiscordApiError) -> PageDone:
        if error.status in _GONE:
            log.info(
                "channel skipped: the bot cannot read it",
                extra={"channel_id": task.channel_id, "status": error.status, "code": error.code},
            )
            self._store.count(task.gap, skipped=1)
            return PageDone(skipped=1)
        if error.status == 429:
            # Back on the queue after the wait Discord asked for; never asked again at once.
            self._queue.send([task], error.retry_after or 1.0)
            return PageDone(later=1)
        raise error

    def _said(self, task: CatchUpTask, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The page's messages as the gateway would have sent them: made in the gap, or
        older and edited since the gap began."""
        events: list[dict[str, Any]] = []
        for message in messages:
            made_ms = snowflake_ms(message["id"])
            if made_ms > task.to_ms:
                break  # received live, after the new session began
            # REST leaves the guild out of a message; ingest keys privacy and consent on it.
            payload = {**message, "guild_id": task.guild_id, "channel_id": task.channel_id}
            if made_ms >= task.from_ms:
                events.append({"t": "MESSAGE_CREATE", "d": payload})
            elif _edited_ms(message) >= task.from_ms:
                events.append({"t": "MESSAGE_UPDATE", "d": payload})
        return events

    def _not_erased(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Without what a person erased: their messages made before they last ran /forgetme
        (the erasure ledger, by keyed person hash) are not imported back."""
        authors = {
            str(e["d"]["author"]["id"])
            for e in events
            if isinstance(e["d"].get("author"), dict)
            and isinstance(e["d"]["author"].get("id"), str)
        }
        hashes = {author: self._hash_of(author) for author in authors}
        erased = self._store.erased_at(hashes.values())
        if not erased:
            return events
        kept = []
        for event in events:
            author = event["d"].get("author") or {}
            when = erased.get(hashes.get(str(author.get("id")), ""))
            if when is None or snowflake_ms(event["d"]["id"]) > when:
                kept.append(event)
        return kept

    def _gone(
        self, task: CatchUpTask, after: str, messages: list[dict[str, Any]], last: str | None
    ) -> list[dict[str, Any]]:
        """Deletes for the messages the table holds over the stretch this page covers (after
        `after`, up to its last message or the gap's end) that Discord no longer has."""
        low = int(after)
        high_ms = task.to_ms if last is None else min(snowflake_ms(last), task.to_ms)
        present = {message["id"] for message in messages}
        held = self._store.messages_held(str(task.channel_id), snowflake_ms(after), high_ms)
        return [
            {
                "t": "MESSAGE_DELETE",
                "d": {"id": m, "channel_id": task.channel_id, "guild_id": task.guild_id},
            }
            for m in held
            if int(m) > low and (last is None or int(m) <= int(last)) and m not in present
        ]


def _guild_tasks(gap: Gap) -> list[CatchUpTask]:
    return [
        CatchUpTask(kind="guild", gap=gap.sk, guild_id=guild, from_ms=gap.from_ms, to_ms=gap.to_ms)
        for guild in gap.guild_ids
    ]


def _edited_ms(message: dict[str, Any]) -> int:
    """When the message was last edited, in epoch ms (0: never, or unreadable)."""
    edited = message.get("edited_timestamp")
    if not isinstance(edited, str):
        return 0
    try:
        return int(datetime.fromisoformat(edited).timestamp() * 1000)
    except ValueError:
        return 0

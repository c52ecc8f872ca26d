"""The consolidation work queue: which channels have work, handed to ConsolidateWorkerFunction.

The table's stream (ConsolidateFunction) and the schedule (SweepFunction) no longer
consolidate: they hand each channel with work to an SQS FIFO queue, one message per
channel, and ConsolidateWorkerFunction consumes it with a bounded concurrency. The message
group is the channel, so one channel is worked on by one worker at a time, in order, while
other channels go on in parallel; the channel lock (botmemory.storage.commit) stays the
correctness guarantee. The deduplication id is the channel and a time window
(ENQUEUE_WINDOW_MS, 10 s: the stream's batching window): a burst in one channel is one
message per window, and a stream batch retried within it is not enqueued twice (SQS drops a
repeated id for 5 minutes). A longer window would leave a busy channel waiting for the next
one after each visit.

A message SQS drops as a duplicate loses no work: the stream consumer first puts the channel
on the sweep's list (mark_pending_since), and the worker, after its last round, either
enqueues the channel again (a full batch still waits) or leaves what is left to the sweep.

A local run (localrun/, tests/support/lambda_local.py) registers an in-process queue under
the name CONSOLIDATE_QUEUE_URL gives; it delivers every message (no deduplication).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from botmemory.clock import Clock
from botmemory.search.keyword_retry import KeywordRetry
from botmemory.settings.config import Settings
from botmemory.storage.keys import server_scope_of
from botmemory.storage.repository import MemoryRepository

log = logging.getLogger(__name__)

# A burst in one channel is one stream message per this window (the FIFO deduplication id).
ENQUEUE_WINDOW_MS = 10_000
# The sweep runs every 5 minutes: one message per channel per run, even if a run repeats.
SWEEP_WINDOW_MS = 300_000
SEND_BATCH = 10  # SendMessageBatch takes at most 10 entries
MAX_BODY_CHARS = 1_000  # a work message is a few dozen characters; anything longer is not one

Source = Literal["stream", "sweep", "continue"]


class WorkMessage(BaseModel):
    """One channel's turn: `force` consolidates below the threshold (the sweep's turn);
    `since_ms` is the channel's place on the sweep's list when the sweep handed it out: logged,
    never read as how long the channel waited (Consolidator.flush reads that from the table)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # A message group id and part of a deduplication id: letters, digits, '_' and '-'.
    channel_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    source: Source = "stream"
    force: bool = False
    since_ms: int | None = Field(default=None, ge=0, le=2**53)


class BadWorkMessage(ValueError):
    """A queue message that is not a work message: skipped and counted, never retried."""


def work_of(body: Any) -> WorkMessage:
    if not isinstance(body, str) or len(body) > MAX_BODY_CHARS:
        raise BadWorkMessage("the body is not a short JSON text")
    try:
        return WorkMessage.model_validate_json(body)
    except ValidationError as error:
        raise BadWorkMessage(f"not a work message: {error.error_count()} errors") from None


def dedup_id(work: WorkMessage, now_ms: int) -> str:
    """The FIFO deduplication id: the source, the channel and its time window."""
    if work.source == "sweep":
        return f"sweep.{work.channel_id}.{now_ms // SWEEP_WINDOW_MS}"
    if work.source == "continue":
        # The worker's own follow-up: unique, never dropped (two follow-ups of one channel
        # can be sent within one millisecond of the clock).
        return f"continue.{work.channel_id}.{now_ms}.{uuid.uuid4().hex[:12]}"
    return f"stream.{work.channel_id}.{now_ms // ENQUEUE_WINDOW_MS}"


def retry_group(scope: str) -> str:
    """The message group of a server's keyword retries (a channel's group is its id alone)."""
    server = server_scope_of(scope)
    return "keywords-" + ("".join(c for c in server if c.isalnum())[:64] or "none")


# In a local run, queue name -> the stack's own delivery of one message body.
_LOCAL_QUEUES: dict[str, Callable[[str, str], None]] = {}


def register_local_queue(name: str, deliver: Callable[[str, str], None]) -> None:
    """Route messages for the queue `name` to `deliver(body, group)` (local runs only)."""
    _LOCAL_QUEUES[name] = deliver


class WorkQueue:
    """Sends work messages to CONSOLIDATE_QUEUE_URL (SendMessageBatch, 10 at a time)."""

    def __init__(self, url: str, clock: Clock, sqs_client: Any | None = None) -> None:
        self._url = url
        self._clock = clock
        self._client = sqs_client

    def send(self, work: Iterable[WorkMessage]) -> set[str]:
        """Enqueue each message; the channels whose message was not accepted (to retry)."""
        messages = list(work)
        local = _LOCAL_QUEUES.get(self._url)
        if local is not None:
            for message in messages:
                local(message.model_dump_json(), message.channel_id)
            return set()
        failed: set[str] = set()
        now = self._clock.now_ms()
        for start in range(0, len(messages), SEND_BATCH):
            chunk = messages[start : start + SEND_BATCH]
            entries = [
                {
                    "Id": str(index),
                    "MessageBody": message.model_dump_json(),
                    "MessageGroupId": message.channel_id,
                    "MessageDeduplicationId": dedup_id(message, now),
                }
                for index, message in enumerate(chunk)
            ]
            try:
                answer = self._sqs().send_message_batch(QueueUrl=self._url, Entries=entries)
            except Exception as error:  # the caller retries these channels
                log.warning(
                    "work not enqueued", extra={"channels": len(chunk), "error": repr(error)[:300]}
                )
                failed |= {m.channel_id for m in chunk}
                continue
            refused = answer.get("Failed") or []
            for entry in refused:
                failed.add(chunk[int(entry["Id"])].channel_id)
            if refused:
                log.warning(
                    "work refused by the queue",
                    extra={"refused": len(refused), "code": refused[0].get("Code")},
                )
        return failed

    def send_keyword_retries(self, retries: Iterable[KeywordRetry]) -> None:
        """Queue passages the keyword leg missed (botmemory.search.keyword_retry), in a message
        group of their server's, never a channel's: a retry waiting for the database holds up
        no channel's work. Raises when the queue refuses one (the caller counts it)."""
        messages = list(retries)
        local = _LOCAL_QUEUES.get(self._url)
        for start in range(0, len(messages), SEND_BATCH):
            chunk = messages[start : start + SEND_BATCH]
            if local is not None:
                for message in chunk:
                    local(message.model_dump_json(), retry_group(message.scope))
                continue
            entries = [
                {
                    "Id": str(index),
                    "MessageBody": message.model_dump_json(),
                    "MessageGroupId": retry_group(message.scope),
                    "MessageDeduplicationId": f"keywords.{uuid.uuid4().hex}",
                }
                for index, message in enumerate(chunk)
            ]
            answer = self._sqs().send_message_batch(QueueUrl=self._url, Entries=entries)
            if answer.get("Failed"):
                raise RuntimeError(f"{len(answer['Failed'])} keyword retries refused by the queue")

    def _sqs(self) -> Any:
        if self._client is None:
            import boto3  # deferred: only a function that hands out work pays for the client

            self._client = boto3.client("sqs")
        return self._client


class WorkDispatcher:
    """Hands channels' work to the queue; the stream's and the sweep's side of it."""

    def __init__(self, queue: WorkQueue, repository: MemoryRepository, clock: Clock) -> None:
        self._queue = queue
        self.repository = repository
        self.clock = clock

    def from_stream(self, channel_ids: Iterable[str]) -> set[str]:
        """New observations in these channels: each goes on the sweep's list (so that a
        message dropped as a duplicate still leaves the work found), then on the queue. The
        channels whose work was not handed out, to fail their records (the stream retries)."""
        failed: set[str] = set()
        marked: list[WorkMessage] = []
        now = self.clock.now_ms()
        for channel_id in dict.fromkeys(channel_ids):
            try:
                self.repository.mark_pending_since(channel_id, now)
            except Exception as error:
                log.warning(
                    "channel not marked", extra={"channel_id": channel_id, "error": repr(error)}
                )
                failed.add(channel_id)
                continue
            marked.append(WorkMessage(channel_id=channel_id))
        return failed | self._queue.send(marked)

    def from_sweep(self, due: Iterable[tuple[str, int]]) -> set[str]:
        """Channels the sweep found due (with their place on its list): forced turns."""
        return self._queue.send(
            WorkMessage(channel_id=c, source="sweep", force=True, since_ms=s) for c, s in due
        )

    def again(self, work: WorkMessage, *, force: bool) -> bool:
        """The worker's follow-up for a channel left behind; False when not enqueued."""
        follow_up = WorkMessage(
            channel_id=work.channel_id, source="continue", force=force, since_ms=work.since_ms
        )
        return not self._queue.send([follow_up])


def local_event(body: str, group: str, sequence: int) -> dict[str, Any]:
    """An SQS FIFO event of one message, as Lambda's poller delivers it (local runs)."""
    return {
        "Records": [
            {
                "messageId": f"local-{sequence}",
                "receiptHandle": f"local-{sequence}",
                "body": body,
                "attributes": {
                    "MessageGroupId": group,
                    "MessageDeduplicationId": f"local-{sequence}",
                    "SequenceNumber": str(sequence),
                    "ApproximateReceiveCount": "1",
                },
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:local.fifo",
                "awsRegion": "us-east-1",
            }
        ]
    }


# The sweep reads its list in pages this long and stops this long before its time is up.
SWEEP_PAGE = 500
SWEEP_RESERVE_MS = 10_000


@dataclass
class Swept:
    """What one sweep handed out."""

    enqueued: int = 0
    failed: int = 0
    complete: bool = True  # False: time ran out, the next sweep goes on

    def as_dict(self) -> dict[str, Any]:
        return {"enqueued": self.enqueued, "failed": self.failed, "complete": self.complete}


class Sweeper:
    """SweepFunction's work: every channel quiet for MEMORY_IDLE_FLUSH_MINUTES with
    observations waiting, longest waiting first, goes to the worker queue as a forced turn
    (the worker decides what a tiny channel waits for: Consolidator.flush). A channel stays
    on the list until its worker is done with it; a later sweep hands it out again only
    after the deduplication window (SWEEP_WINDOW_MS)."""

    def __init__(self, settings: Settings, dispatcher: WorkDispatcher) -> None:
        self._settings = settings
        self._dispatcher = dispatcher

    def sweep(self, time_left_ms: Callable[[], int]) -> Swept:
        swept = Swept()
        if not self._settings.memory_enabled:
            return swept
        repository, clock = self._dispatcher.repository, self._dispatcher.clock
        before = clock.now_ms() - self._settings.idle_flush_minutes * 60_000
        page: list[tuple[str, int]] = []
        for due in repository.channels_due_since(before, SWEEP_PAGE):
            page.append(due)
            if len(page) == SWEEP_PAGE:
                self._hand_out(page, swept)
                page = []
                if time_left_ms() < SWEEP_RESERVE_MS:
                    swept.complete = False
                    return swept
        self._hand_out(page, swept)
        return swept

    def _hand_out(self, page: list[tuple[str, int]], swept: Swept) -> None:
        unique = list(dict(page).items())  # a channel moved on the list while read: once
        failed = self._dispatcher.from_sweep(unique)
        swept.enqueued += len(unique) - len(failed)
        swept.failed += len(failed)

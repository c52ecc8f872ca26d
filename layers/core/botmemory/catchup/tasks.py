"""The catch-up queue's messages: a guild of a gap to plan, or one page of a channel's
history to fetch (botmemory.catchup.worker), and how they are sent.

A standard queue (CATCHUP_QUEUE_URL): order does not matter, since every page is stored by
message id, and a page's successor is sent only once the page is done, so one channel is
read by one worker at a time. A message may be delayed (the wait a rate limit announced).

A local run or a test registers an in-process queue under the name CATCHUP_QUEUE_URL gives.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from botmemory.snowflake import Snowflake

log = logging.getLogger(__name__)

SEND_BATCH = 10  # SendMessageBatch takes at most 10 entries
MAX_DELAY_SECONDS = 900  # SQS's longest delay
MAX_BODY_CHARS = 1_000
MAX_PAGES = 10_000


class CatchUpTask(BaseModel):
    """`guild`: find the guild's active channels; `page`: read one page of `channel_id`
    after `after`. `from_ms`/`to_ms` are the gap's; `page` counts the channel's pages.
    `backfill`: one page of a server's backfill run `run` (botmemory.catchup.backfill),
    which imports what was said from `from_ms` to `to_ms`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["guild", "page", "backfill"]
    gap: str | None = Field(default=None, pattern=r"^GAP#[0-9]{13}#[0-9]{5}$")
    run: int | None = Field(default=None, ge=0, le=2**53)
    guild_id: Snowflake
    from_ms: int = Field(ge=0, le=2**53)
    to_ms: int = Field(ge=0, le=2**53)
    channel_id: Snowflake | None = None
    after: Snowflake | None = None
    page: int = Field(default=0, ge=0, le=MAX_PAGES)


class BadTask(ValueError):
    """A queue message that is not a catch-up task: skipped and counted, never retried."""


def task_of(body: Any) -> CatchUpTask:
    if not isinstance(body, str) or len(body) > MAX_BODY_CHARS:
        raise BadTask("the body is not a short JSON text")
    try:
        task = CatchUpTask.model_validate_json(body)
    except ValidationError as error:
        raise BadTask(f"not a catch-up task: {error.error_count()} errors") from None
    if task.kind != "guild" and (task.channel_id is None or task.after is None):
        raise BadTask("a page task names its channel and where it starts")
    if (task.kind == "backfill") != (task.run is not None) or (task.gap is None) != (
        task.kind == "backfill"
    ):
        raise BadTask("a gap's task names its gap, a backfill's its run")
    return task


Deliver = Callable[[str, int], None]  # body, delay in seconds
_LOCAL_QUEUES: dict[str, Deliver] = {}


def register_local_catchup_queue(name: str, deliver: Deliver) -> None:
    """Route messages for the queue `name` to `deliver(body, delay)` (local runs only)."""
    _LOCAL_QUEUES[name] = deliver


class TaskQueue:
    """Sends catch-up tasks to CATCHUP_QUEUE_URL (SendMessageBatch, 10 at a time)."""

    def __init__(self, url: str, sqs_client: Any | None = None) -> None:
        self._url = url
        self._client = sqs_client

    def send(self, tasks: Iterable[CatchUpTask], delay_seconds: float = 0.0) -> int:
        """Enqueue each task, delayed by `delay_seconds` (rounded up, at most 15 minutes);
        raises when the queue refused any, so the caller's message is retried."""
        bodies = [task.model_dump_json() for task in tasks]
        delay = min(max(math.ceil(delay_seconds), 0), MAX_DELAY_SECONDS)
        local = _LOCAL_QUEUES.get(self._url)
        if local is not None:
            for body in bodies:
                local(body, delay)
            return len(bodies)
        for start in range(0, len(bodies), SEND_BATCH):
            entries = [
                {"Id": str(i), "MessageBody": body, "DelaySeconds": delay}
                for i, body in enumerate(bodies[start : start + SEND_BATCH])
            ]
            answer = self._sqs().send_message_batch(QueueUrl=self._url, Entries=entries)
            if answer.get("Failed"):
                raise RuntimeError(f"catch-up queue refused {len(answer['Failed'])} tasks")
        return len(bodies)

    def _sqs(self) -> Any:
        if self._client is None:
            import boto3  # deferred: only a function that sends tasks pays for the client

            self._client = boto3.client("sqs")
        return self._client

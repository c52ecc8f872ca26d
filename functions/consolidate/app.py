"""ConsolidateFunction: the table's stream hands each channel's new work to the worker queue.

The stream's FilterCriteria deliver only INSERTs of OBS# items. Each channel in the batch
goes on the sweep's list and gets one message on ConsolidateWorkerFunction's FIFO queue
(botmemory.consolidation.work); no model is called here, so a slow model never holds the
shard. A record that cannot be read, or whose channel's work was not handed out (the queue
or the table refused it), is reported alone in `batchItemFailures`: the stream retries it,
and nothing is lost.
"""

from __future__ import annotations

import contextlib
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from botmemory.observability import logger, metrics
from botmemory.runtime import work_dispatcher_from_environment
from botmemory.settings.config import get_settings
from botmemory.storage.keys import channel_id_of

# Read at cold start: a missing or malformed setting fails the init in one line naming it.
get_settings()

processor = BatchProcessor(event_type=EventType.DynamoDBStreams)
MAX_LOGGED_IDS = 20  # a log line names at most this many ingest invocations


def channel_of(record: DynamoDBRecord) -> str:
    item_keys = record.dynamodb.keys if record.dynamodb else None
    pk = (item_keys or {}).get("pk")
    channel_id = channel_id_of(pk) if isinstance(pk, str) else None
    if channel_id is None:
        raise ValueError(f"stream record {record.event_id} is not a channel observation")
    return channel_id


def ingest_id_of(record: DynamoDBRecord) -> str | None:
    """The correlation id of the ingest invocation that stored this observation, if any."""
    image = record.dynamodb.new_image if record.dynamodb else None
    value = (image or {}).get("ingest_id")
    return value if isinstance(value, str) else None


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    # Per channel, the ingest invocations whose observations this batch carries.
    ingest_ids: dict[str, set[str]] = {}
    for raw in event.get("Records") or []:
        record = DynamoDBRecord(raw)
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            ingest_ids.setdefault(channel_of(record), set()).update(
                [i] if (i := ingest_id_of(record)) else []
            )
    # One message per channel for the whole batch; the channels it could not hand out fail.
    failed = work_dispatcher_from_environment().from_stream(ingest_ids) if ingest_ids else set()
    metrics.add_metric(
        name="WorkEnqueued", unit=MetricUnit.Count, value=len(ingest_ids) - len(failed)
    )
    if failed:
        metrics.add_metric(name="WorkNotEnqueued", unit=MetricUnit.Count, value=len(failed))
    for channel_id, ids in ingest_ids.items():
        logger.info(
            "channel work handed out"
            if channel_id not in failed
            else "channel work not handed out",
            extra={"channel_id": channel_id, "ingest_ids": sorted(ids)[:MAX_LOGGED_IDS]},
        )

    def hand_out(record: DynamoDBRecord) -> None:
        channel_id = channel_of(record)
        if channel_id in failed:
            raise RuntimeError(f"work of channel {channel_id} not enqueued; the stream retries")

    return process_partial_response(
        event=event, record_handler=hand_out, processor=processor, context=context
    )

"""ConsolidateFunction: stream records of new observations trigger per-channel consolidation.

The stream's FilterCriteria deliver only INSERTs of OBS# items. Each channel in the batch
is consolidated once; a record that cannot be read, or whose channel failed with an
error, is reported alone in `batchItemFailures`. A model failure is not an error here:
the observations stay pending and the next trigger or the sweep retries them.
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

from botmemory.consolidation.outcome import Outcome, outcome_metrics
from botmemory.observability import logger, metrics
from botmemory.runtime import services_from_environment
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


def record_metrics(outcomes: list[Outcome]) -> None:
    for name, value in outcome_metrics(outcomes):
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    consolidator = services_from_environment().consolidator
    # One consolidation per channel per batch; its result (or error) answers every record of it.
    done: dict[str, Exception | None] = {}
    # Per channel, the ingest invocations whose observations this batch carries.
    ingest_ids: dict[str, set[str]] = {}
    for raw in event.get("Records") or []:
        record = DynamoDBRecord(raw)
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            ingest_id = ingest_id_of(record)
            if ingest_id:
                ingest_ids.setdefault(channel_of(record), set()).add(ingest_id)

    def consolidate_record(record: DynamoDBRecord) -> None:
        channel_id = channel_of(record)
        if channel_id not in done:
            try:
                outcomes = consolidator.consolidate(
                    channel_id, time_left_ms=context.get_remaining_time_in_millis
                )
            except Exception as error:
                logger.exception("consolidation failed", extra={"channel_id": channel_id})
                done[channel_id] = error
            else:
                done[channel_id] = None
                record_metrics(outcomes)
                logger.info(
                    "channel consolidated",
                    extra={
                        "channel_id": channel_id,
                        "rounds": [o.status.value for o in outcomes],
                        "ingest_ids": sorted(ingest_ids.get(channel_id, ()))[:MAX_LOGGED_IDS],
                    },
                )
        failure = done[channel_id]
        if failure is not None:
            raise failure

    return process_partial_response(
        event=event, record_handler=consolidate_record, processor=processor, context=context
    )

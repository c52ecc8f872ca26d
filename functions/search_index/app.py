"""SearchIndexFunction: the search index follows the table.

The stream's FilterCriteria deliver REMOVE and MODIFY records of observations, facts,
episodes and archived channel summaries; each one whose item left the table (TTL expiry,
erasure, a deleted message, /memory forget) or whose words changed (a redacted name, a
corrected or superseded fact) names the passages to remove. A record that cannot be read is
logged and counted (it would never read better).

A batch's removals go to the index in one call. When that call fails, each record is
removed on its own through Powertools' BatchProcessor, as ConsolidateFunction does: a
record whose removal fails is reported alone in `batchItemFailures` (the stream retries
it, then parks it in SearchIndexDeadLetterQueue), and the others' removals stand. Removal
is idempotent, so a record delivered again is harmless.
"""

from __future__ import annotations

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
from botmemory.runtime import services_from_environment
from botmemory.search.index_sync import FollowReport, IndexFollower
from botmemory.settings.config import get_settings

# Read at cold start: a missing or malformed setting fails the init in one line naming it.
get_settings()

processor = BatchProcessor(event_type=EventType.DynamoDBStreams)


def record_metrics(report: FollowReport, failed: int = 0) -> None:
    metrics.add_metric(name="SearchPassagesRemoved", unit=MetricUnit.Count, value=report.removed)
    if report.skipped:
        metrics.add_metric(name="SearchRecordsSkipped", unit=MetricUnit.Count, value=report.skipped)
    if failed:
        metrics.add_metric(name="SearchRecordsFailed", unit=MetricUnit.Count, value=failed)


def follow_one_by_one(
    follower: IndexFollower, event: dict[str, Any], context: LambdaContext
) -> PartialItemFailureResponse:
    """Each record's removal on its own: one the index refuses fails alone."""
    total = FollowReport()

    def follow_record(record: DynamoDBRecord) -> None:
        try:
            report = follower.follow([record.raw_event])
        except Exception:
            logger.exception("removal failed", extra={"event_id": record.event_id})
            raise
        total.removed += report.removed
        total.skipped += report.skipped

    # Every record failing raises (BatchProcessingError): the whole batch is retried.
    response = process_partial_response(
        event=event, record_handler=follow_record, processor=processor, context=context
    )
    failed = len(response.get("batchItemFailures", []))
    record_metrics(total, failed)
    logger.info("index followed the table", extra={"removed": total.removed, "failed": failed})
    return response


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    follower = services_from_environment().index_follower
    records = event.get("Records") or []
    if follower is None:  # search is off: nothing is indexed, so nothing can go stale
        logger.info("search is off; records ignored", extra={"records": len(records)})
        return {"batchItemFailures": []}
    try:
        report = follower.follow(records)  # the whole batch in one removal
    except Exception:
        logger.exception("the batch's removal failed; removing record by record")
        return follow_one_by_one(follower, event, context)
    record_metrics(report)
    logger.info("index followed the table", extra={"removed": report.removed})
    return {"batchItemFailures": []}

"""IngestFunction: batches of raw gateway dispatch events from the relay become observations.

Invoked asynchronously with `{"events": [{"t": ..., "d": {...}}, ...]}`. Each event is one
conditional PutItem; a malformed event is skipped with its reason and never takes the
rest of the batch down.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from botmemory.ingest.observe import events_from
from botmemory.observability import logger, metrics
from botmemory.runtime import answer_requests_from_environment, services_from_environment
from botmemory.settings.config import get_settings

# Read at cold start: a missing or malformed setting fails the init in one line naming it.
get_settings()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        events = events_from(event)
    except ValueError as error:
        # Async invokes retry on errors; a request that can never parse is answered, not raised.
        logger.warning("rejected ingest request", extra={"reason": str(error)})
        metrics.add_metric(name="IngestRequestsRejected", unit=MetricUnit.Count, value=1)
        return {
            "error": str(error),
            "stored": 0,
            "channels": 0,
            "duplicates": 0,
            "ignored": [],
            "rejected": [],
        }
    # The request id is this batch's correlation id: each observation keeps it, and the
    # consolidation that consumes them logs it.
    logger.set_correlation_id(context.aws_request_id)
    result = services_from_environment().recorder.record(events, ingest_id=context.aws_request_id)
    # Mentions of the bot, replies to it, DMs: AnswerFunction answers them (asynchronously).
    answers = answer_requests_from_environment().after_ingest(events, result)
    if answers:
        metrics.add_metric(name="AnswersRequested", unit=MetricUnit.Count, value=answers)
    if result.backfills:  # the bot joined a server whose history is imported on join
        metrics.add_metric(
            name="BackfillsStartedOnJoin", unit=MetricUnit.Count, value=result.backfills
        )
    if result.joined_at_missing:  # a relay from before it forwarded `joined_at`
        metrics.add_metric(
            name="GuildCreatesWithoutJoinedAt",
            unit=MetricUnit.Count,
            value=result.joined_at_missing,
        )
    metrics.add_metric(name="ObservationsStored", unit=MetricUnit.Count, value=result.stored)
    metrics.add_metric(name="ObservationDuplicates", unit=MetricUnit.Count, value=result.duplicates)
    metrics.add_metric(name="EventsIgnored", unit=MetricUnit.Count, value=len(result.ignored))
    metrics.add_metric(name="EventsRejected", unit=MetricUnit.Count, value=len(result.rejected))
    return result.model_dump()

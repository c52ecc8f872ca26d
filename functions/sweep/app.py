"""SweepFunction: on a schedule, hand quiet channels whose observations have waited to the
worker queue (botmemory.consolidation.work); ConsolidateWorkerFunction consolidates them."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from botmemory.consolidation.work import Sweeper
from botmemory.observability import logger, metrics
from botmemory.runtime import work_dispatcher_from_environment
from botmemory.settings.config import get_settings

# Read at cold start: a missing or malformed setting fails the init in one line naming it.
get_settings()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    swept = Sweeper(get_settings(), work_dispatcher_from_environment()).sweep(
        time_left_ms=context.get_remaining_time_in_millis
    )
    metrics.add_metric(name="SweptChannels", unit=MetricUnit.Count, value=swept.enqueued)
    if swept.failed:
        metrics.add_metric(name="WorkNotEnqueued", unit=MetricUnit.Count, value=swept.failed)
    logger.info("sweep done", extra=swept.as_dict())
    return swept.as_dict()

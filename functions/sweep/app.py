"""SweepFunction: on a schedule, consolidate quiet channels whose observations have waited."""

from __future__ import annotations

from collections import Counter
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from botmemory.consolidation.outcome import outcome_metrics
from botmemory.observability import logger, metrics
from botmemory.runtime import services_from_environment
from botmemory.settings.config import get_settings

# Read at cold start: a missing or malformed setting fails the init in one line naming it.
get_settings()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    outcomes = services_from_environment().consolidator.sweep(
        time_left_ms=context.get_remaining_time_in_millis
    )
    statuses = Counter(o.status.value for o in outcomes)
    consumed = sum(o.consumed for o in outcomes)
    metrics.add_metric(
        name="SweptChannels", unit=MetricUnit.Count, value=len({o.channel_id for o in outcomes})
    )
    for name, value in outcome_metrics(outcomes):
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    logger.info("sweep done", extra={"statuses": dict(statuses), "consumed": consumed})
    return {
        "channels": len({o.channel_id for o in outcomes}),
        "consumed": consumed,
        "statuses": dict(statuses),
    }

"""ServerPurgeFunction: every hour, purge by key the servers the bot was removed from whose
grace period (MEMORY_SERVER_PURGE_DAYS) is over (botmemory.people.server_removal); a purge
that outlasts a run goes on from its checkpoint in the next."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from botmemory.clock import SystemClock
from botmemory.observability import logger, metrics
from botmemory.people.server_removal import purge_due
from botmemory.settings.config import get_settings
from botmemory.storage.repository import open_repository

# Read at cold start: a missing or malformed setting fails the init in one line naming it.
get_settings()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    repository = open_repository(get_settings().table_name)
    report = purge_due(
        repository, SystemClock().now_ms(), time_left_ms=context.get_remaining_time_in_millis
    )
    metrics.add_metric(name="ServersPurged", unit=MetricUnit.Count, value=len(report.servers))
    metrics.add_metric(name="ServerItemsPurged", unit=MetricUnit.Count, value=report.items)
    logger.info("server purge run", extra=asdict(report))
    return asdict(report)

"""ServerPurgeFunction: every hour, purge by key the servers the bot was removed from whose
grace period (MEMORY_SERVER_PURGE_DAYS) is over (botmemory.people.server_removal); a purge
that outlasts a run goes on from its checkpoint in the next. Then, in the time left, bring
the stored items of servers whose staff shortened their retention in line with it
(botmemory.people.retention_job), likewise by key and from a checkpoint."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from botmemory.clock import SystemClock
from botmemory.observability import logger, metrics
from botmemory.people.retention_job import apply_due
from botmemory.people.server_removal import purge_due
from botmemory.runtime import departures_from_environment
from botmemory.settings.config import get_settings
from botmemory.storage.repository import open_repository

# Read at cold start: a missing or malformed setting fails the init in one line naming it.
get_settings()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = get_settings()
    repository = open_repository(settings.table_name)
    time_left = context.get_remaining_time_in_millis
    report = purge_due(repository, SystemClock().now_ms(), time_left_ms=time_left)
    metrics.add_metric(name="ServersPurged", unit=MetricUnit.Count, value=len(report.servers))
    metrics.add_metric(name="ServerItemsPurged", unit=MetricUnit.Count, value=report.items)
    logger.info("server purge run", extra=asdict(report))
    retention = apply_due(repository, settings, SystemClock().now_ms(), time_left_ms=time_left)
    metrics.add_metric(
        name="RetentionItemsShortened", unit=MetricUnit.Count, value=retention.shortened
    )
    logger.info("server retention run", extra=asdict(retention))
    # With the GUILD_MEMBERS intent: members who left, checked with Discord, then erased.
    departed = departures_from_environment(repository, SystemClock().now_ms(), time_left)
    metrics.add_metric(name="DepartedMembersErased", unit=MetricUnit.Count, value=departed.erased)
    logger.info("departed members run", extra=asdict(departed))
    return {**asdict(report), "retention": asdict(retention), "departed": asdict(departed)}

"""SearchIndexFunction: the search index follows the table.

The stream's FilterCriteria deliver REMOVE and MODIFY records of observations, facts,
episodes and archived channel summaries; each one whose item left the table (TTL expiry,
erasure, a deleted message, /memory forget) or whose words changed (a redacted name, a corrected or superseded fact)
names the passages to remove. A record that cannot be read is logged and counted; a failure
of the index fails the batch, which the stream retries (removal is idempotent).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from botmemory.config import get_settings
from botmemory.observability import logger, metrics
from botmemory.runtime import services_from_environment

# Read at cold start: a missing or malformed setting fails the init in one line naming it.
get_settings()


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    follower = services_from_environment().index_follower
    records = event.get("Records") or []
    if follower is None:  # search is off: nothing is indexed, so nothing can go stale
        logger.info("search is off; records ignored", extra={"records": len(records)})
        return {"batchItemFailures": []}
    report = follower.follow(records)
    metrics.add_metric(name="SearchPassagesRemoved", unit=MetricUnit.Count, value=report.removed)
    if report.skipped:
        metrics.add_metric(name="SearchRecordsSkipped", unit=MetricUnit.Count, value=report.skipped)
    logger.info("index followed the table", extra={"removed": report.removed})
    return {"batchItemFailures": []}

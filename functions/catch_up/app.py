"""CatchUpFunction: catching up on a gap the relay could not receive (botmemory.catchup).

On its schedule it plans the gaps the relay recorded (one task per guild); from its queue
it works one task a message: a guild's active channels, or one page of a channel's history
read through Discord's REST API into the ingest path. A message that is not a task is a
counted skip; a task that fails is retried by the queue, then parked in its dead-letter
queue (alarmed).
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
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from botmemory import invocation
from botmemory.catchup.tasks import BadTask, task_of
from botmemory.observability import logger, metrics
from botmemory.runtime import catch_up_from_environment
from botmemory.settings.config import get_settings

# Read at cold start: a missing or malformed setting fails the init in one line naming it.
get_settings()

processor = BatchProcessor(event_type=EventType.SQS)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(
    event: dict[str, Any], context: LambdaContext
) -> PartialItemFailureResponse | dict[str, Any]:
    invocation.begin(context)  # Discord rate-limit waits end before the invocation does
    catch_up = catch_up_from_environment()
    if "Records" not in event:  # the schedule
        planned = catch_up.plan()
        metrics.add_metric(name="CatchUpGapsPlanned", unit=MetricUnit.Count, value=planned)
        return {"planned": planned}

    def work_on(record: SQSRecord) -> None:
        try:
            task = task_of(record.body)
        except BadTask as error:
            logger.warning("queue message skipped", extra={"error": str(error)[:300]})
            metrics.add_metric(name="CatchUpMalformed", unit=MetricUnit.Count, value=1)
            return
        done = catch_up.run(task, ingest_id=context.aws_request_id)
        for name, value in (
            ("CatchUpStored", done.stored),
            ("CatchUpDeleted", done.deleted),
            ("CatchUpChannelsSkipped", done.skipped),
            ("CatchUpRateLimited", done.later),
        ):
            if value:
                metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)

    return process_partial_response(
        event=event, record_handler=work_on, processor=processor, context=context
    )

"""ConsolidateWorkerFunction: one channel's consolidation per queue message.

Its FIFO queue (botmemory.consolidation.work) holds one message group per channel, so each
channel is worked on by one worker at a time while others go on in parallel (the event
source's MaximumConcurrency bounds how many). A round never starts without the time to
finish (its model call's worst case included); a channel left behind is enqueued again. A
model failure is not an error here: the observations stay pending, the channel backs off
and the sweep retries it. A message that is not a work message is a counted skip, as is a
channel with nothing to do (deleted, unknown, or already done). A message of passages the
keyword leg missed (botmemory.search.keyword_retry) is written to it again; while the keyword
database still does not answer, the message fails and comes back.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from botmemory.consolidation.outcome import Status, outcome_metrics
from botmemory.consolidation.work import BadWorkMessage, work_of
from botmemory.observability import logger, metrics
from botmemory.runtime import services_from_environment, work_dispatcher_from_environment
from botmemory.search.keyword_retry import index_keywords_again, keyword_retry_of
from botmemory.settings.config import get_settings

# Read at cold start: a missing or malformed setting fails the init in one line naming it.
get_settings()

# A failed channel fails only its own group's later messages, never another channel's.
processor = SqsFifoPartialProcessor(skip_group_on_error=True)
# A batch whose every message failed answers them all as failures (the queue hands them out
# again) rather than raising: the same for SQS, without an invocation error per attempt
# while, say, the keyword database resumes.
processor.raise_on_entire_batch_failure = False


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    consolidator = services_from_environment().consolidator

    def work_on(record: SQSRecord) -> None:
        retry = keyword_retry_of(record.body)
        if retry is not None:  # passages the keyword leg missed: raises while it is still down
            services = services_from_environment()
            done = index_keywords_again(
                services.search_index, services.repository, services.clock, retry
            )
            metrics.add_metric(
                name="KeywordRetryWritten", unit=MetricUnit.Count, value=done.written
            )
            metrics.add_metric(name="KeywordRetryGone", unit=MetricUnit.Count, value=done.gone)
            return
        try:
            work = work_of(record.body)
        except BadWorkMessage as error:
            logger.warning("queue message skipped", extra={"error": str(error)[:300]})
            metrics.add_metric(name="WorkMalformed", unit=MetricUnit.Count, value=1)
            return
        time_left = context.get_remaining_time_in_millis
        if work.source == "sweep":
            outcomes = consolidator.flush(work.channel_id, time_left_ms=time_left)
        else:
            outcomes = consolidator.consolidate(
                work.channel_id, force=work.force, time_left_ms=time_left
            )
        for name, value in outcome_metrics(outcomes):
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
        last = outcomes[-1]
        if last.status == Status.NOTHING_PENDING and len(outcomes) == 1:
            metrics.add_metric(name="WorkSkipped", unit=MetricUnit.Count, value=1)
        logger.info(
            "channel worked on",
            extra={
                "channel_id": work.channel_id,
                "source": work.source,
                "rounds": [o.status.value for o in outcomes],
                "again": last.again,
            },
        )
        if last.again:
            # Not enqueued: fail the message, so the queue hands it out again.
            force = work.force or last.splitting
            if not work_dispatcher_from_environment().again(work, force=force):
                raise RuntimeError(f"channel {work.channel_id} left behind and not enqueued")
            metrics.add_metric(name="WorkContinued", unit=MetricUnit.Count, value=1)

    return process_partial_response(
        event=event, record_handler=work_on, processor=processor, context=context
    )

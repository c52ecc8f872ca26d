"""AnswerFunction: answers a message that mentions or replies to the bot, a DM, or /ask.

Started asynchronously by IngestFunction (`{"answer": <trigger>}`) and InteractionsFunction
(`{"ask": ...}`); the work is botmemory.answering.answerer. An event it cannot read is answered with
its reason, never raised: an asynchronous invoke would only retry it.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from botmemory import invocation
from botmemory.answering.answerer import AnswerReport
from botmemory.answering.requests import BadAnswerEvent, question_of
from botmemory.observability import logger, metrics
from botmemory.runtime import (
    answerer_from_environment,
    discord_from_environment,
    services_from_environment,
)
from botmemory.settings.config import get_settings

# Read at cold start: a missing or malformed setting fails the init in one line naming it.
get_settings()


def record_metrics(report: AnswerReport) -> None:
    metrics.add_metric(name=f"Answer_{report.status.value}", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="AnswerMessagesPosted", unit=MetricUnit.Count, value=report.posted)
    if report.corrections:
        metrics.add_metric(
            name="MemoryCorrections", unit=MetricUnit.Count, value=report.corrections
        )
    if report.refused_corrections:
        metrics.add_metric(
            name="MemoryCorrectionsRefused", unit=MetricUnit.Count, value=report.refused_corrections
        )
    if report.recall_hits:
        metrics.add_metric(
            name="RecallHitsRecorded", unit=MetricUnit.Count, value=report.recall_hits
        )
    if report.recall_hits_failed:
        metrics.add_metric(name="RecallHitsFailed", unit=MetricUnit.Count, value=1)


def export(event: dict[str, Any], function_name: str) -> dict[str, Any]:
    from botmemory.answering.exports import BadExportRequest, deliver_export, export_request_of
    from botmemory.answering.requests import invoke_async

    try:
        request = export_request_of(event)
    except BadExportRequest as error:
        logger.warning("rejected export request", extra={"reason": str(error)})
        return {"error": str(error)}
    report = deliver_export(
        services_from_environment(),
        discord_from_environment(),
        request,
        invocation.time_left_ms,
        # What this invocation's time left unsent goes on in the next (it invokes itself).
        continue_with=lambda payload: invoke_async(function_name, payload),
    )
    metrics.add_metric(name="ExportPartsSent", unit=MetricUnit.Count, value=report.parts)
    return asdict(report)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    invocation.begin(context)  # Discord rate-limit waits end before the invocation does
    if "export" in event:  # `/memory export` (botmemory.answering.exports)
        return export(event, context.function_name)
    try:
        question, reply = question_of(event)
    except BadAnswerEvent as error:
        logger.warning("rejected answer request", extra={"reason": str(error)})
        metrics.add_metric(name="AnswerRequestsRejected", unit=MetricUnit.Count, value=1)
        return {"error": str(error)}
    # The message answered (or the /ask interaction): the same id the ingest line logged.
    logger.set_correlation_id(question.message_id or (reply.interaction or {}).get("id"))
    report = answerer_from_environment().answer(question, reply)
    record_metrics(report)
    logger.info(
        "answered",
        extra={
            "status": report.status.value,
            "posted": report.posted,
            "corrections": report.corrections,
            "prompt_chars": report.prompt_chars,
            "channel_id": question.channel_id,
        },
    )
    return {**asdict(report), "status": report.status.value}

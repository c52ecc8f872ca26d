"""`/memory export`, delivered: AnswerFunction (which alone may read the bot token) sends the
member's export (botmemory.people.export) to their direct messages as JSON attachments, one
part per message, then edits the command's "thinking…" answer to say how it went.

InteractionsFunction starts it (`{"export": {...}}`, an asynchronous invoke, as `/ask`).
Each invocation sends parts until its time runs short (`botmemory.invocation`), then starts
the next invocation with the cursor (`continue_with`: AnswerFunction invokes itself), so a
long export is never cut by the function's timeout: at most `MAX_HOPS` invocations in a row,
each having sent a part. An export still not finished then (or stopped) keeps its cursor in
the table (the member's EXPORT item), and the member's next `/memory export` goes on from
there (not refused by the rate limit). Closed DMs (Discord's
403) stop it, and the answer says so. The interaction's token lasts 15 minutes: past them
the answer is not edited (the parts are in the DMs all the same).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botmemory.discord.errors import DiscordApiError
from botmemory.discord.followup import token_expired
from botmemory.discord.rest import DiscordApi
from botmemory.people.export import ExportCursor, Exporter
from botmemory.services import MemoryServices

log = logging.getLogger(__name__)

# Outside an invocation (a local run), time is not what bounds an export.
UNBOUNDED_MS = 10**9
# Invocations one export may chain (each sent a part): some 75 parts, 75 MB, an hour or so.
MAX_HOPS = 50

DMS_CLOSED = (
    "I could not send you a direct message: your DMs are closed to me (Privacy Settings, "
    "Direct Messages for this server). Open them and run `/memory export` again; it goes on "
    "where it stopped."
)


class BadExportRequest(ValueError):
    """An export request that cannot be read."""


@dataclass(frozen=True)
class ExportRequest:
    user_id: str
    interaction: dict[str, Any]  # id, token, application_id
    cursor: dict[str, Any] | None
    hops: int = 0  # the invocations before this one

    def next(self, cursor: dict[str, Any]) -> dict[str, Any]:
        """The event of the invocation that goes on from `cursor`."""
        body = {
            "user_id": self.user_id,
            "interaction": self.interaction,
            "cursor": cursor,
            "hops": self.hops + 1,
        }
        return {"export": body}


def export_request_of(event: dict[str, Any]) -> ExportRequest:
    body = event.get("export")
    if not isinstance(body, dict):
        raise BadExportRequest("no export object")
    user_id = body.get("user_id")
    interaction = body.get("interaction")
    if not isinstance(user_id, str) or not user_id.isdigit() or len(user_id) > 20:
        raise BadExportRequest("export without a user id")
    if not isinstance(interaction, dict):
        raise BadExportRequest("export without its interaction")
    cursor = body.get("cursor")
    hops = body.get("hops", 0)
    if not isinstance(hops, int) or isinstance(hops, bool) or not 0 <= hops <= MAX_HOPS:
        raise BadExportRequest("export with a bad hop count")
    return ExportRequest(user_id, interaction, cursor if isinstance(cursor, dict) else None, hops)


@dataclass
class ExportReport:
    parts: int = 0
    records: int = 0
    finished: bool = False
    dms_closed: bool = False
    continued: bool = False  # the next invocation was started


def deliver_export(
    services: MemoryServices,
    discord: DiscordApi,
    request: ExportRequest,
    time_left_ms: Callable[[], int | None] | None = None,
    continue_with: Callable[[dict[str, Any]], None] | None = None,
) -> ExportReport:
    """Send what the invocation's time allows of the export (module docstring)."""

    def left() -> int:
        ms = time_left_ms() if time_left_ms is not None else None
        return ms if ms is not None else UNBOUNDED_MS

    repository = services.repository
    person = services.opt_outs.hash_of(request.user_id)
    cursor = ExportCursor.from_json(request.cursor)
    first_part = cursor.parts
    report = ExportReport()
    exporter = Exporter(
        repository, request.user_id, settings=lambda scopes: _settings(services, request, scopes)
    )
    # Where the parts sent end: a part refused is read again by the next run, never skipped.
    sent = cursor.to_json()
    try:
        channel = discord.open_dm(request.user_id)
        for part in exporter.parts(cursor, left):
            discord.send_files(
                channel,
                f"Your memory export, part {part.number}"
                + (" (the last)" if cursor.finished else ""),
                [(f"memory-export-{part.number}.json", part.body.encode())],
                nonce=f"x{str(request.interaction.get('id', ''))[-14:]}p{part.number}",
            )
            sent = cursor.to_json()
    except DiscordApiError as error:
        if error.status != 403:
            raise
        report.dms_closed = True
        cursor = ExportCursor.from_json(sent)
    report.parts = cursor.parts - first_part
    report.records = cursor.items
    report.finished = cursor.finished and not report.dms_closed
    repository.keep_export_cursor(person, None if report.finished else cursor.to_json())
    going_on = not report.finished and not report.dms_closed and report.parts > 0
    if going_on and continue_with is not None and request.hops < MAX_HOPS:
        continue_with(request.next(cursor.to_json()))
        report.continued = True
    log.info(
        "export delivered",
        extra={
            "parts": report.parts,
            "records": report.records,
            "finished": report.finished,
            "continued": report.continued,
            "hops": request.hops,
        },
    )
    _tell(services, discord, request, _answer(report, cursor))
    return report


def _settings(
    services: MemoryServices, request: ExportRequest, scopes: list[str]
) -> dict[str, Any]:
    """Their settings: opted out, paused until, the servers they agreed to be recorded in."""
    person = services.opt_outs.hash_of(request.user_id)
    servers = [s for s in scopes if s.isdigit()]
    return {
        "opted_out": request.user_id in services.opt_outs.barred([request.user_id]),
        "paused_until_ms": services.recorder.gate.paused_until(request.user_id),
        "agreed_to_be_recorded_in": [
            s for s in servers if services.repository.consented(s, person)
        ],
    }


def _answer(report: ExportReport, cursor: ExportCursor) -> str:
    if report.dms_closed:
        return DMS_CLOSED
    if report.continued:
        return (
            f"Sent {cursor.parts} part{'s' if cursor.parts > 1 else ''} so far ({cursor.items:,} "
            "records); the rest follows in your direct messages in a moment."
        )
    if report.finished:
        return (
            f"Sent to your direct messages: everything I keep about you, {cursor.items:,} "
            f"records in {cursor.parts} JSON file{'s' if cursor.parts > 1 else ''}."
        )
    return (
        f"Sent {cursor.parts} part{'s' if cursor.parts > 1 else ''} so far ({cursor.items:,} "
        "records); there is more. Run `/memory export` again to get the rest: it goes on "
        "where it stopped."
    )


def _tell(services: MemoryServices, discord: DiscordApi, request: ExportRequest, text: str) -> None:
    interaction = request.interaction
    if token_expired(interaction, services.clock.now_ms()):
        log.warning("export answer skipped: the interaction's token expired")
        return
    try:
        discord.edit_original_response(
            str(interaction.get("application_id", "")),
            str(interaction.get("token", "")),
            {"content": text},
        )
    except (DiscordApiError, ValueError) as error:
        log.warning("export answer not edited", extra={"error": str(error)[:300]})

"""Log output: text for people, or one JSON object a line for CloudWatch (RELAY_LOG_FORMAT=json).

The lines operations alarm on carry an `event` field (the names below) and their figures as
fields of their own, so a CloudWatch Logs metric filter reads them with a JSON pattern such
as `{ $.event = "relay_health" }` (relay/template.yaml). A JSON line holds a traceback in
one field, so CloudWatch keeps it as one log event. In text the lines read as they always
have; the fields are not printed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime

# The periodic health line: totals since start, the sink's state (forwarder.py).
HEALTH_EVENT = "relay_health"
# Discord refused the relay for good (bad token, intents, sharding); the relay exits (gateway.py).
REFUSED_EVENT = "relay_gateway_refused"
# One IDENTIFY counted against the day's (identify_gate.py), and one the daily cap refused.
IDENTIFY_EVENT = "relay_identify"
IDENTIFY_REFUSED_EVENT = "relay_identify_refused"
# A session that could not be resumed: events between from_ms and to_ms were not received.
GAP_EVENT = "relay_gap"

_FIELDS = "relay_fields"  # the LogRecord attribute that carries an event's fields


def fields(event: str, values: Mapping[str, object]) -> dict[str, object]:
    """The `extra` of a log call whose line is an event: its name and its figures."""
    return {_FIELDS: {"event": event, **values}}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the static fields (the
    shard), an event's own fields, and the traceback if there is one."""

    def __init__(self, static: Mapping[str, object] | None = None) -> None:
        super().__init__()
        self._static = dict(static or {})

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **self._static,
        }
        event = getattr(record, _FIELDS, None)
        if isinstance(event, dict):
            entry.update(event)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def formatter(log_format: str, static: Mapping[str, object] | None = None) -> logging.Formatter:
    """The formatter for RELAY_LOG_FORMAT: "json", or "text" (static fields only in JSON)."""
    if log_format == "json":
        return JsonFormatter(static)
    return logging.Formatter(TEXT_FORMAT)

"""The test fact factory: a fact as consolidation would store it, learned in one channel
(botmemory.memory.visibility) unless a test says otherwise."""

from __future__ import annotations

from typing import Any

from botmemory.clock import DAY_MS, epoch_seconds
from botmemory.records import Fact, FactKind, FactSource
from localrun import gateway as gw


def a_fact(
    user_id: str,
    text: str,
    *,
    scope: str = gw.GUILD,
    at_ms: int = 0,
    learned_in: tuple[str, ...] = (gw.CHANNEL,),
    public: bool = False,
    retention_days: float = 180,
    **fields: Any,
) -> Fact:
    """`learned_in`: the channels its evidence was said in (all public when `public`)."""
    values: dict[str, Any] = {
        "fact_id": f"f{abs(hash((user_id, text, scope))) % 10**8:08d}",
        "scope": scope,
        "user_id": user_id,
        "text": text,
        "kind": FactKind.FACT,
        "source": FactSource.SELF,
        "created_ms": at_ms,
        "updated_ms": at_ms,
        "expires_at": epoch_seconds(at_ms + int(retention_days * DAY_MS)),
        "learned_in": list(learned_in),
        "learned_in_public": list(learned_in) if public else [],
    }
    values.update(fields)
    return Fact(**values)

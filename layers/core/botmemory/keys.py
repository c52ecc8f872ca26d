"""Key builders: the only place that knows how items are addressed."""

from __future__ import annotations

STATE_SK = "STATE"
PROFILE_SK = "PROFILE"
OBS_PREFIX = "OBS#"
EPISODE_PREFIX = "EP#"
FACT_PREFIX = "FACT#"
PIN_PREFIX = "PIN#"
SWEEP_BUCKET = "SWEEP"
OPT_OUT_PK = "OPTOUT"
# Powertools Idempotency keeps its records for interactions under this partition.
IDEMPOTENCY_PK = "IDEMPOTENCY#interactions"


def channel_pk(channel_id: str) -> str:
    return f"CH#{channel_id}"


def scope_pk(scope: str) -> str:
    return f"SC#{scope}"


def user_pk(scope: str, user_id: str) -> str:
    return f"SC#{scope}#U#{user_id}"


def observation_sk(at_ms: int, kind: str, *ids: str) -> str:
    return f"{OBS_PREFIX}{at_ms:013d}#{kind}#{'#'.join(ids)}"


def episode_sk(created_ms: int, episode_id: str) -> str:
    return f"{EPISODE_PREFIX}{created_ms:013d}#{episode_id}"


def fact_sk(fact_id: str) -> str:
    return f"{FACT_PREFIX}{fact_id}"


def fact_rank(updated_ms: int, fact_id: str) -> str:
    return f"{updated_ms:013d}#{fact_id}"


def pin_sk(target: str, pin_id: str) -> str:
    return f"{PIN_PREFIX}{target}#{pin_id}"

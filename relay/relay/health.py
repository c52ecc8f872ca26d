"""`python -m relay.health`: the container's health check in the fleet mode.

Healthy while the task's loop turns (relay.fleet touches a file at every lease renewal
or standby poll), whether or not it holds a lease: a new task of a rolling deploy is
healthy on standby, so ECS stops the old one, whose leases it then takes. No deadlock."""

from __future__ import annotations

import sys
import time

from relay.config import ConfigError, RelayConfig

# In RELAY_SPOOL_DIR; touched by relay.fleet. Here, so the check imports no gateway code.
ALIVE_FILE = "alive"
# Several turns of the loop: RELAY_SAVE_SECONDS and RELAY_POLL_SECONDS are at most 60.
STALE_SECONDS = 180.0


def main() -> int:
    try:
        config = RelayConfig.from_env()
    except ConfigError as error:
        print(f"relay: {error}", file=sys.stderr)
        return 1
    try:
        age = time.time() - (config.spool_dir / ALIVE_FILE).stat().st_mtime
    except OSError:
        return 1
    return 0 if age < STALE_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())

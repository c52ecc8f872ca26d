"""`python -m relay`: hold the gateway session and forward its events (README.md)."""

from __future__ import annotations

import argparse
import logging
import sys

from relay.app import (
    build_forwarder,
    configure_logging,
    lock_state_dir,
    run_gateway,
    run_replay,
)
from relay.config import ConfigError, RelayConfig
from relay.credentials import bot_token

log = logging.getLogger("relay")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m relay",
        description="Forward Discord gateway message events to IngestFunction.",
    )
    parser.add_argument(
        "--replay",
        metavar="FILE",
        help="forward JSON-lines events from FILE ('-' for stdin) instead of connecting to Discord",
    )
    args = parser.parse_args(argv)
    try:
        config = RelayConfig.from_env()
    except ConfigError as error:
        print(f"relay: {error}", file=sys.stderr)
        return 2
    configure_logging(config)
    _lock = lock_state_dir(config.state_dir)  # held until the process exits
    if args.replay:
        return run_replay(config, build_forwarder(config), args.replay)
    try:
        token = bot_token()
    except ConfigError as error:
        log.error("%s", error)
        return 2
    except Exception as error:  # Secrets Manager unreachable or access denied
        log.error("could not read the bot token: %r", error)
        return 1
    shard = config.shard
    log.info(
        "relay starting; sink %s; %s",
        config.ingest_function_name or config.ingest_url,
        "unsharded" if shard is None else f"shard {shard.id} of {shard.count}",
    )
    return run_gateway(config, build_forwarder(config), token)


if __name__ == "__main__":
    sys.exit(main())

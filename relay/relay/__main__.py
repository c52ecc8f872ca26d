"""`python -m relay`: hold the gateway session and forward its events (README.md)."""

from __future__ import annotations

import argparse
import logging
import sys

from relay.app import (
    build_forwarder,
    build_sink,
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
    token = None
    if not args.replay:
        try:
            token = bot_token()
        except ConfigError as error:
            log.error("%s", error)
            return 2
        except Exception as error:  # Secrets Manager unreachable or access denied
            log.error("could not read the bot token: %r", error)
            return 1
    sink = build_sink(config)
    shard = config.shard
    # The sink's own description names it, scheme and all, once.
    log.info(
        "relay starting; sink %s; %s%s",
        sink.description,
        "unsharded" if shard is None else f"shard {shard.id} of {shard.count}",
        "; replaying " + args.replay if args.replay else "",
    )
    forwarder = build_forwarder(config, sink)
    if token is None:
        return run_replay(config, forwarder, args.replay)
    return run_gateway(config, forwarder, token)


if __name__ == "__main__":
    sys.exit(main())

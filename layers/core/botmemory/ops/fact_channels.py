"""Where facts stored before facts kept their channels were learned (botmemory.memory.visibility).

    python -m botmemory.ops.fact_channels [--dry-run]      (TABLE_NAME from the environment)

Run once after upgrading a deployment. Until then such a fact is shown nowhere but in its
person's `/memory show` and the staff listings: without channel information it counts as
said in a private channel. For each fact without `learned_in`, the channels of its evidence
are read from the observations it cites (`provenance`), found by the by_user index under the
people who said them, while those observations are still in the table; a channel counts as
public when @everyone can view it now. A fact whose evidence has expired keeps no channel
information and stays shown nowhere until it is said again (consolidation then adds the
channel it is said in). Running it twice changes nothing the second time. Exit codes: 0 done,
1 AWS or configuration error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError

from botmemory.settings.config import ConfigError, get_settings
from botmemory.storage import keys
from botmemory.storage.repository import MemoryRepository, open_repository


@dataclass
class Report:
    examined: int = 0  # facts without channel information
    resolved: int = 0  # given the channels of their evidence
    unresolved: int = 0  # evidence gone: still shown nowhere

    def lines(self) -> list[str]:
        return [
            f"facts without channels: {self.examined}",
            f"given the channels of their evidence: {self.resolved}",
            f"evidence gone (shown only in /memory show until said again): {self.unresolved}",
        ]


def backfill(repository: MemoryRepository, *, dry_run: bool = False) -> Report:
    report = Report()
    for fact in repository.facts_without_channels():
        report.examined += 1
        people = [
            p for p in [str(fact.get("user_id", "")), *fact.get("evidence_user_ids", [])] if p
        ]
        channels = [
            channel
            for sk in fact.get("provenance", [])
            if (channel := repository.channel_of_observation(str(sk), people))
        ]
        if not channels:
            report.unresolved += 1
            continue
        report.resolved += 1
        if dry_run:
            continue
        server = keys.server_scope_of(str(fact.get("scope", "")))
        public = [c for c in dict.fromkeys(channels) if repository.channel_is_public(server, c)]
        repository.add_fact_channels(fact["pk"], fact["sk"], channels, public)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m botmemory.ops.fact_channels",
        description="Give facts stored before facts kept their channels the channels of "
        "their evidence.",
    )
    parser.add_argument("--dry-run", action="store_true", help="count, write nothing")
    args = parser.parse_args(argv)
    try:
        settings = get_settings()
        repository = open_repository(settings.table_name)
        report = backfill(repository, dry_run=args.dry_run)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (ClientError, BotoCoreError) as exc:
        print(f"error: AWS request failed: {exc}", file=sys.stderr)
        return 1
    print("\n".join(report.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

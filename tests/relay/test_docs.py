"""The relay's docs agree with its code and with each other: the events it forwards, and how
its template is deployed."""

from __future__ import annotations

import re
from pathlib import Path

from relay.events import FORWARDED_EVENTS, GUILD_EVENTS, MESSAGE_EVENTS

ROOT = Path(__file__).resolve().parents[2]
RELAY_README = ROOT / "relay" / "README.md"
DOCS = [ROOT / "README.md", RELAY_README, ROOT / "relay" / "template.yaml", *ROOT.glob("docs/*.md")]
NUMBERS = {"eight": 8, "twelve": 12, "thirteen": 13, "twenty": 20, "twenty-three": 23}


def forwarded_section() -> str:
    text = RELAY_README.read_text(encoding="utf-8")
    section = text.split("## What it forwards", 1)[1].split("\n## ", 1)[0]
    # Up to the paragraph about what is dropped, which names ignored dispatches.
    return section.split("Every frame is parsed", 1)[0]


def test_the_events_the_relay_readme_lists_are_the_events_it_forwards() -> None:
    listed = set(re.findall(r"`([A-Z]+(?:_[A-Z]+)+|READY)`", forwarded_section()))
    listed = {name for name in listed if not name.startswith("RELAY_")}  # settings named there
    assert listed == FORWARDED_EVENTS


def test_every_count_of_the_forwarded_events_in_the_docs_is_right() -> None:
    counted = 0
    for path in DOCS:
        text = " ".join(path.read_text(encoding="utf-8").split())
        for word, kind in re.findall(
            r"\b(eight|twelve|thirteen|twenty-three|twenty) (message event|guild|types)", text
        ):
            expected = {"message event": MESSAGE_EVENTS, "guild": GUILD_EVENTS}
            assert NUMBERS[word] == len(expected.get(kind, FORWARDED_EVENTS)), (path, word, kind)
            counted += 1
    assert counted >= 3  # relay/README.md (twice) and docs/operations.md say them


def test_the_relay_template_is_deployed_one_way_everywhere() -> None:
    commands = []
    for path in DOCS:
        for line in path.read_text(encoding="utf-8").splitlines():
            if "--template-file relay/template.yaml" in line:
                commands.append((path.name, line.strip().lstrip("#").strip()))
    assert len(commands) >= 3, commands
    for name, line in commands:
        assert line.startswith("aws cloudformation deploy "), (name, line)

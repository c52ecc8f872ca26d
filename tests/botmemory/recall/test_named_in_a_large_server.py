"""A query naming a member of a large server (issue 28 item 6): recall reads the name registry
by key for the names the query could hold, never a fixed first 2,000 entries, so a member far
down a registry of thousands is found and their facts join the block."""

from __future__ import annotations

from typing import Any

from botmemory.services import MemoryServices
from localrun.storage import put_facts
from tests.botmemory.consolidation.test_name_lookup import RegistryReads, member, seed_registry
from tests.botmemory.recall.test_search_leg import CHANNEL, GUILD, ask
from tests.conftest import START_MS
from tests.support.facts import a_fact

MEMBERS = 2_500  # more than the 2,000 a scan of the registry used to read


def test_a_member_named_far_down_the_registry_is_found(
    searching: MemoryServices, dynamodb: Any
) -> None:
    seed_registry(searching, GUILD, MEMBERS)
    far = member(MEMBERS - 3)  # "Zephyrine02497": past the first 2,000 in key order
    put_facts(
        searching.repository,
        [
            a_fact(
                far,
                "Zephyrine keeps bees",
                scope=GUILD,
                at_ms=START_MS,
                learned_in=(CHANNEL,),
                public=True,
            )
        ],
    )
    reads = RegistryReads(dynamodb)

    body = ask(searching, "what does Zephyrine02497 keep in her garden?")

    assert "Zephyrine keeps bees" in body["memory"]
    assert reads.queries == 0  # no scan of the registry, however large
    assert 0 < reads.keys <= 20  # the few names the question could hold

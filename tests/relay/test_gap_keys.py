"""The relay writes its gaps under keys the core reads back (botmemory.catchup): the relay
cannot import the core, so both spell them, and this holds them equal."""

from __future__ import annotations

from botmemory.storage import keys
from relay import store


def test_the_relay_and_the_core_spell_a_gap_alike() -> None:
    assert store.PARTITION == keys.RELAY_PK
    assert store.GAP_PREFIX == keys.RELAY_GAP_PREFIX
    assert store.Store.gaps_sk(1_700_000_000_000, 7) == "GAP#1700000000000#00007"

"""Where a memory may be shown: what is said in a private channel is never repeated outside it.

A fact keeps the channels its evidence was said in (`Fact.learned_in`) and, of those, the
ones that were public when it was learned (`Fact.learned_in_public`: @everyone could view
the channel, botmemory.ingest.channels). It is shown in a channel only when

- that channel is one it was learned in, or
- one of the public channels it was learned in is still public now: visibility is read when
  a memory is shown, not only when it is written, so a channel made private (a
  CHANNEL_UPDATE, a role change) stops its words crossing from then on, and a deleted
  channel's at once (its visibility item is gone: unknown counts as private).

Words said in a channel (a message search found, a short-term entry, an episode) follow the
same rule with the channel they were said in. A fact without channel information (stored
before facts kept their channels, its evidence gone from the table) is shown nowhere but in
the person's own `/memory show` and staff listings. In a direct message, which only its one
member reads, that member sees their own facts: what they said there, and what they said in
the servers they share with the bot (recall reads those for the direct message).

Each of a fact's two channel sets holds at most MAX_FACT_CHANNELS channels: once one is full, a
restatement in another channel adds nothing to it (`Where.within_cap`), so a fact confirmed all
over a large server stays a small item. A channel left out only ever shows the fact in fewer
places (the rule above shows it nowhere a set does not name), a channel is left out of
`learned_in_public` whenever it is left out of `learned_in`, and a full set is never empty.

This module is the rule's one owner: recall, the answer prompt (memory block, speaker note,
correctable facts), correction notices and the listings all ask it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from botmemory.records import Fact, MemoryScope

# At most this many channels in each of a fact's channel sets (module docstring): those it was
# learned in first are kept.
MAX_FACT_CHANNELS = 50


@dataclass(frozen=True)
class Visibility:
    """What may be shown where: the channel being answered in, and the server's channels
    that are public now (empty in direct messages, or when the server's channels are not
    known: then nothing crosses)."""

    channel_id: str
    public_now: frozenset[str] = frozenset()
    # In a direct message, the one person who reads it: their own facts are shown there
    # from wherever they were learned (they said them; nobody else reads the channel).
    reader: str | None = None

    def shows_words_of(self, channel_id: str) -> bool:
        """Whether words said in `channel_id` may be shown here."""
        return channel_id == self.channel_id or channel_id in self.public_now

    def shows(self, fact: Fact) -> bool:
        """Whether `fact` may be shown here: learned here, or in a channel still public;
        in a direct message, any of its reader's own."""
        if self.reader is not None and fact.user_id == self.reader:
            return fact.memory_scope == MemoryScope.USER
        if self.channel_id in fact.learned_in:
            return True
        return any(channel in self.public_now for channel in fact.learned_in_public)

    def facts(self, facts: Iterable[Fact]) -> list[Fact]:
        return [fact for fact in facts if self.shows(fact)]


@dataclass(frozen=True)
class Where:
    """Where a fact is learned: the `Fact.learned_in` and `Fact.learned_in_public` it gets."""

    learned_in: list[str]
    learned_in_public: list[str]

    @classmethod
    def of(cls, fact: Fact) -> Where:
        return cls(list(fact.learned_in), list(fact.learned_in_public))

    def fields(self) -> dict[str, list[str]]:
        return {"learned_in": self.learned_in, "learned_in_public": self.learned_in_public}

    def within_cap(self, fact: Fact | None) -> Where:
        """Those of these channels that may be added to where `fact` is stored as learned
        (None: nothing stored yet): the ones it holds already, and new ones while the set has
        room (MAX_FACT_CHANNELS). A channel is added as public only with the channel itself."""
        held = fact.learned_in if fact else []
        learned = _fitting(held, self.learned_in)
        public = [c for c in self.learned_in_public if c in learned or c in held]
        return Where(learned, _fitting(fact.learned_in_public if fact else [], public))

    def added_to(self, fact: Fact | None) -> Where:
        """These channels added to where `fact` was learned before (None: these alone),
        within the cap."""
        fits = self.within_cap(fact)
        if fact is None:
            return fits
        return Where(
            list(dict.fromkeys([*fact.learned_in, *fits.learned_in])),
            list(dict.fromkeys([*fact.learned_in_public, *fits.learned_in_public])),
        )


def _fitting(held: list[str], new: list[str]) -> list[str]:
    """Of the `new` channels, those a set holding `held` keeps: the ones it has, and the
    others in order while it has fewer than MAX_FACT_CHANNELS."""
    have = set(held)
    room = MAX_FACT_CHANNELS - len(have)
    kept: list[str] = []
    for channel in dict.fromkeys(new):
        if channel in have:
            kept.append(channel)
        elif room > 0:
            kept.append(channel)
            room -= 1
    return kept


def learned_where(channel_id: str, public: bool) -> Where:
    """Where a fact learned in one channel (public or not when learned) is shown."""
    return Where([channel_id], [channel_id] if public else [])


def place_label(fact: Fact) -> str:
    """Where a fact was learned, for the listings (`/memory show`, staff): each channel as
    Discord links it, those that were not public then marked."""
    if not fact.learned_in:
        return "learned where: not known, so shown nowhere until said again"
    places = [
        f"<#{channel}>" if channel in fact.learned_in_public else f"<#{channel}> (private)"
        for channel in fact.learned_in
    ]
    return "learned in " + ", ".join(places)

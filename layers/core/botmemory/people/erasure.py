"""`/forgetme` and opting out: erase what is kept about a person, found by their id.

What goes: every item that holds the person's id (the by_user index: facts, profiles,
the observations they wrote, their reactions, the pins made in their name, quarantine
records, forget tombstones, Named pointers, the history entries of their facts, the deferred
candidates of their facts), the candidates resting on their words in the channels they spoke
in, and the episodes they took part in (by
participant id, in the channels their SPOKE# items list, one a channel, and those older
profiles still list), and likewise the channel's rolling
summary and its archives (botmemory.consolidation.summary). Text written by others is touched
only where it names them: each Named pointer leads to one item (an episode naming them
is deleted, another person's recorded message loses their mentions and their distinctive
names), and in the episodes of channels they spoke in, a summary that mentions their id
or a name distinctive to them (`names.is_distinctive`) is deleted. In the history of
someone else's fact that they changed (staff, or the person the chat model answered), an
ACTED# pointer leads to the entry, which loses their id and stays its subject's. A name someone merely
chose ("the", or "Alice" like another member) never matches: nobody's nickname erases
anyone else's data. Channel histories are never read.

The work runs in steps, each a bounded amount of reading that deletes what it finds
before the next: a marker first (consolidation commits nothing of the person while it
lives), then the episodes of their channels one channel at a time, then the knowledge of
their servers' personas learned from them (botmemory.memory.personas) one persona at a time, then
their items (persona_user facts included: they carry the person's id) a page at a time (listing again until a pass finds nothing: the index is eventually
consistent), then the replay-protection records quoting them, the name registry, and the
profiles and SPOKE# items last (they remember the channels). Between steps the run checks its time
budget; when it runs short it stops and returns a checkpoint that a continuation resumes
from, so an erasure is never restarted from scratch and never does a step twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from botmemory.clock import DAY_MS, Clock, SystemClock, epoch_seconds
from botmemory.people.names import is_distinctive, mention_pattern, names_pattern, redacted
from botmemory.people.optout import person_hash
from botmemory.records import ChannelSummary, Episode
from botmemory.storage import keys
from botmemory.storage.keys import ItemKind, server_scope_of
from botmemory.storage.repository import MemoryRepository
from botmemory.storage.round_people import spoke_of
from botmemory.storage.table import ItemRef
from botmemory.text import normalized, scrub

# A sample of a person's messages is enough to learn the names they went by.
NAME_SAMPLE = 50
# The person's items are listed and deleted this many at a time.
PAGE = 100
# Consolidation keeps about ten episodes per channel; no channel is read further than this.
EPISODES_SCANNED_PER_CHANNEL = 50
# A run stops and hands over to a continuation when less time than this is left.
RESERVE_MS = 20_000
# Full listings of the person's items before giving up (each pass deletes what it finds).
MAX_PASSES = 5
# The marker lives while the erasure runs (refreshed by every run) ...
MARKER_TTL_MS = DAY_MS
# ... and, once it is done, until every consolidation that began before it has ended (the
# channel lock's lease bounds a run); then the person may be remembered again (opt-in).
SETTLE_MS = 900_000
# Command answers quoting the person's facts or pins are found by their ids.
MAX_QUOTED_IDS = 5000

_EPISODES = "episodes"
_PERSONAS = "personas"
_ITEMS = "items"
_REPLAY = "replay"
_PROFILES = "profiles"
_DONE = "done"


def erasure_hash(user_id: str) -> str:
    """The keyed person hash the erasure marker is kept under (the opt-out list's), so the
    marker names nobody. Commands pass `OptOuts.hash_of`, which caches the key."""
    return person_hash(user_id)


class ErasureUnfinished(RuntimeError):
    """The person's items kept coming back after every pass: something keeps writing them."""


@dataclass
class ErasureReport:
    facts: int = 0
    observations: int = 0
    episodes: int = 0
    pins: int = 0
    profiles: int = 0
    other: int = 0
    mentions_redacted: int = 0
    channels: list[str] = field(default_factory=list)
    finished: bool = True
    # Where an unfinished run stops: plain JSON, for `Eraser.erase(checkpoint=...)`.
    checkpoint: dict[str, Any] | None = None

    def summary(self) -> str:
        return (
            f"{self.facts} facts, {self.observations} recorded messages and reactions, "
            f"{self.episodes} channel summaries, {self.pins} pins, {self.profiles} profiles, "
            f"{self.other} other records; your name was removed from "
            f"{self.mentions_redacted} of other people's messages"
        )


@dataclass
class _Run:
    """An erasure's progress, kept between steps and handed to continuations."""

    phase: str
    started_ms: int
    names: list[str]  # every name the person went by, distinctive or not
    distinctive: dict[str, list[str]]  # by scope: the names that are theirs alone
    channels: list[list[str]]  # [scope, channel] pairs whose episodes are still to read
    # Persona scopes of the person's servers whose knowledge is still to read.
    persona_scopes: list[str] = field(default_factory=list)
    channels_seen: list[str] = field(default_factory=list)
    # The person's SPOKE# items (a channel each) are listed a page at a time as the
    # episodes step needs them: where the next page starts, and whether the last was read.
    spoke_cursor: dict[str, Any] | None = None
    spoke_listed: bool = False
    cursor: dict[str, Any] | None = None
    found_in_pass: bool = False
    passes: int = 0
    quoted_ids: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    # One server only (a member who left it, botmemory.people.departures): its id and its
    # channels; None: everywhere.
    server: str | None = None
    server_channels: list[str] = field(default_factory=list)

    def here(self, scope: str) -> bool:
        """Whether a scope is within the erasure's reach."""
        return self.server is None or server_scope_of(scope) == self.server

    def holds(self, ref: ItemRef) -> bool:
        """Whether an item is within the erasure's reach (by its key)."""
        if self.server is None:
            return True
        channel = ref.channel_id
        return channel in self.server_channels if channel else ref.server == self.server

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _Run:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def add(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def report(self, *, finished: bool) -> ErasureReport:
        count = self.counts.get
        return ErasureReport(
            facts=count("facts", 0),
            observations=count("observations", 0),
            episodes=count("episodes", 0),
            pins=count("pins", 0),
            profiles=count("profiles", 0),
            other=count("other", 0),
            mentions_redacted=count("mentions_redacted", 0),
            channels=sorted(self.channels_seen),
            finished=finished,
            checkpoint=None if finished else self.to_json(),
        )


class Eraser:
    def __init__(
        self,
        repository: MemoryRepository,
        clock: Clock | None = None,
        hash_of: Callable[[str], str] = erasure_hash,
        settle_ms: int = SETTLE_MS,
        lineages: Callable[[str], list[str]] | None = None,
    ) -> None:
        self._repository = repository
        # A server's persona lineages (botmemory.memory.personas), removed personas' included.
        self._lineages = lineages or (lambda scope: [])
        self._clock = clock or SystemClock()
        self._hash_of = hash_of
        self._settle_ms = settle_ms

    def erase(
        self,
        user_id: str,
        extra_names: Iterable[str] = (),
        *,
        checkpoint: dict[str, Any] | None = None,
        time_left_ms: Callable[[], int] | None = None,
        server: str | None = None,
    ) -> ErasureReport:
        """Erase the person (in one `server` only, when given: what was kept of them there,
        with the same guarantees), or as much as the time budget allows: an unfinished report
        carries the checkpoint to continue from."""
        now = self._clock.now_ms()
        marker = self._hash_of(user_id)
        self._repository.mark_erasing(marker, now, epoch_seconds(now + MARKER_TTL_MS))
        # For good: reading the past again (catching up, a backfill) never brings it back
        # (a server-scoped erasure too: keeping out more of the past is the safe side).
        self._repository.record_erased(marker, now)
        run = (
            _Run.from_json(checkpoint)
            if checkpoint
            else self._start(user_id, extra_names, now, server)
        )
        while run.phase != _DONE:
            if time_left_ms is not None and time_left_ms() < RESERVE_MS:
                return run.report(finished=False)
            self._step(run, user_id)
        settled = max(self._clock.now_ms(), run.started_ms + self._settle_ms)
        self._repository.mark_erasing(marker, now, epoch_seconds(settled))
        return run.report(finished=True)

    # Steps --------------------------------------------------------------------------

    def _start(
        self, user_id: str, extra_names: Iterable[str], now_ms: int, server: str | None
    ) -> _Run:
        """The names and channels the later steps need, from the person's profiles and a
        sample of their messages (read before anything is deleted)."""
        repository = self._repository
        reach = _Run(phase=_EPISODES, started_ms=now_ms, names=[], distinctive={}, channels=[])
        if server is not None:
            reach.server, reach.server_channels = server, repository.server_channel_ids(server)
        profiles = [
            profile
            for ref in repository.user_items_page(user_id, PAGE, kind=ItemKind.PROFILE)[0]
            if (profile := repository.profile_at(ref)) is not None and reach.here(profile.scope)
        ]
        sample, _ = repository.user_items_page(user_id, NAME_SAMPLE, kind=ItemKind.OBSERVATION)
        heads = [
            h
            for h in repository.observation_heads([r for r in sample if reach.holds(r)])
            if reach.here(str(h.get("scope") or ""))
        ]
        names = {scrub(n).strip() for n in extra_names if n}
        names |= {p.display_name.strip() for p in profiles if p.display_name}
        names |= {str(h["author_name"]).strip() for h in heads if h.get("author_name")}
        # Every name they went by (account name, global name), not the display name alone.
        names |= {str(n).strip() for h in heads for n in h.get("author_names") or []}
        names.discard("")
        scopes = {p.scope for p in profiles} | {str(h["scope"]) for h in heads if h.get("scope")}
        # Profiles written before channels had items of their own still list them.
        pairs = sorted({(p.scope, c) for p in profiles for c in p.channels})
        run = _Run(
            phase=_EPISODES,
            started_ms=now_ms,
            names=sorted(names),
            distinctive={},
            channels=[[scope, channel_id] for scope, channel_id in pairs],
            persona_scopes=[
                keys.persona_scope(scope, lineage)
                for scope in sorted(scopes)
                for lineage in self._lineages(scope)
            ],
            server=reach.server,
            server_channels=reach.server_channels,
        )
        self._list_spoken(run, user_id)  # the first page; the episodes step reads the rest
        for scope in sorted(scopes | {scope for scope, _ in run.channels}):
            self._distinctive(run, scope, user_id)
        return run

    def _step(self, run: _Run, user_id: str) -> None:
        if run.phase == _EPISODES:
            self._episodes_step(run, user_id)
        elif run.phase == _PERSONAS:
            self._personas_step(run, user_id)
        elif run.phase == _ITEMS:
            self._items_step(run, user_id)
        elif run.phase == _REPLAY:
            self._replay_step(run, user_id)
        elif run.phase == _PROFILES:
            self._profiles_step(run, user_id)

    def _episodes_step(self, run: _Run, user_id: str) -> None:
        """One channel the person spoke in: the episodes they took part in, or that mention
        their id or a name of theirs alone, go."""
        if not run.channels and not run.spoke_listed:
            self._list_spoken(run, user_id)
        if not run.channels:
            if run.spoke_listed:
                run.phase = _PERSONAS if run.persona_scopes else _ITEMS
            return
        scope, channel_id = run.channels[0]
        names = self._distinctive(run, scope, user_id)
        repository = self._repository
        summaries: list[Episode] = [
            *repository.summary_archives(channel_id, EPISODES_SCANNED_PER_CHANNEL),
            *filter(None, [repository.channel_summary(channel_id, consistent=True)]),
        ]
        doomed = [
            episode
            for episode in repository.recent_episodes(channel_id, EPISODES_SCANNED_PER_CHANNEL)
            + summaries
            if _episode_names(episode, user_id, names)
        ]
        run.add("episodes", self._repository.delete_episodes(doomed))
        # Deferred candidates (botmemory.consolidation.candidates) holding their fact, or knowledge resting
        # on their words; their own are also found by id with their items.
        run.add("facts", repository.forget_candidates_of(channel_id, user_id))
        run.channels_seen.append(channel_id)
        run.channels.pop(0)

    def _list_spoken(self, run: _Run, user_id: str) -> None:
        """One page of the channels the person spoke in (their SPOKE# items), queued for
        the episodes step; a channel already read is not read again."""
        refs, run.spoke_cursor = self._repository.user_items_page(
            user_id, PAGE, run.spoke_cursor, kind=ItemKind.SPOKE
        )
        queued = {(scope, channel) for scope, channel in run.channels}
        for ref in refs:
            pair = spoke_of(ref.pk, ref.sk, user_id)
            if pair and not run.here(pair[0]):
                continue
            if pair and pair not in queued and pair[1] not in run.channels_seen:
                run.channels.append(list(pair))
                queued.add(pair)
        run.spoke_listed = run.spoke_cursor is None

    def _personas_step(self, run: _Run, user_id: str) -> None:
        """One persona of their servers: the knowledge it learned from them goes (what it
        knows of them alone, persona_user, holds their id and goes with their items)."""
        if not run.persona_scopes:
            run.phase = _ITEMS
            return
        run.add("facts", self._repository.forget_persona_knowledge(run.persona_scopes[0], user_id))
        run.persona_scopes.pop(0)
        if not run.persona_scopes:
            run.phase = _ITEMS

    def _items_step(self, run: _Run, user_id: str) -> None:
        """One page of the person's items: pointers are followed, then everything but the
        profiles is deleted. A pass that deleted something is followed by another."""
        repository = self._repository
        refs, next_start = repository.user_items_page(user_id, PAGE, run.cursor)
        # Profiles and SPOKE# items go last: they remember the person's channels.
        work = [ref for ref in refs if ref.kind not in _LAST and run.holds(ref)]
        for ref in work:
            if ref.kind == ItemKind.NAMED:
                self._follow_pointer(run, ref, user_id)
            elif ref.kind == ItemKind.ACTED:  # they changed someone else's fact: unname them
                repository.clear_actor(ref, user_id)
            elif ref.kind in (ItemKind.FACT, ItemKind.PIN) and len(run.quoted_ids) < MAX_QUOTED_IDS:
                run.quoted_ids.append(ref.item_id)
        by_kind: dict[str, list[ItemRef]] = {}
        for ref in work:
            by_kind.setdefault(_count_of(ref.kind), []).append(ref)
        for what, refs_of_kind in by_kind.items():
            run.add(what, repository.delete_items(refs_of_kind))
        run.found_in_pass = run.found_in_pass or bool(work)
        run.cursor = next_start
        if next_start is None:
            if run.found_in_pass:
                run.passes += 1
                run.found_in_pass = False
                if run.passes >= MAX_PASSES:
                    raise ErasureUnfinished(f"items of the person remain after {run.passes} passes")
            else:
                run.phase = _REPLAY

    def _follow_pointer(self, run: _Run, ref: ItemRef, user_id: str) -> None:
        """An item written by someone else that names the person: an episode goes, another
        person's message keeps its words minus the person's mentions and names."""
        repository = self._repository
        named = repository.named_at(ref)
        if named is None or named.user_id != user_id:
            return
        target = repository.target_of(named)
        if target.kind in (ItemKind.EPISODE, ItemKind.SUMMARY, ItemKind.SUMMARY_ARCHIVE):
            if repository.delete_if_present(target):
                run.add("episodes")
        elif target.kind == ItemKind.OBSERVATION:
            observation = repository.observation_at(target)
            if observation is None or observation.author_id == user_id:
                return  # gone, or theirs: deleted with their own items
            cleaned = redacted(
                observation.content, [user_id], self._distinctive(run, named.scope, user_id)
            )
            if cleaned != observation.content:
                repository.redact_observation(observation, cleaned)
                run.add("mentions_redacted")

    def _replay_step(self, run: _Run, user_id: str) -> None:
        """Replay-protection records keep a command's answer for an hour; those quoting the
        person (their id, a name of theirs alone, the id of a fact or pin of theirs) go."""
        names = (
            set.intersection(*(set(n) for n in run.distinctive.values()))
            if run.distinctive
            else set()
        )
        pattern = names_pattern(names)
        quoted = [f"`{item_id}`" for item_id in run.quoted_ids]
        doomed = [
            record.ref
            for record in self._repository.replay_records()
            if user_id in record.data
            or (pattern is not None and pattern.search(record.data))
            or any(q in record.data for q in quoted)
        ]
        run.add("other", self._repository.delete_items(doomed))
        run.phase = _PROFILES

    def _profiles_step(self, run: _Run, user_id: str) -> None:
        """Last: their SPOKE# items go (a page a step: a person may have spoken in thousands
        of channels), the person leaves the name registry, their profiles go, and one more
        listing checks that nothing of theirs is left (else another pass over the items)."""
        repository = self._repository
        if run.server is None:
            spoken, more = repository.user_items_page(user_id, PAGE, kind=ItemKind.SPOKE)
            if spoken:
                run.add("other", repository.delete_items(spoken))
                if more is not None:
                    return
        else:  # one server's: read past the others' (bounded: the person's SPOKE# items)
            spoken = self._all_of(user_id, run, ItemKind.SPOKE)
            run.add("other", repository.delete_items(spoken))
        for scope in sorted(run.distinctive):
            for name in run.names:
                repository.drop_from_name(scope, name, user_id)
        profiles, _ = repository.user_items_page(user_id, PAGE, kind=ItemKind.PROFILE)
        run.add("profiles", repository.delete_items([p for p in profiles if run.holds(p)]))
        left = (
            repository.user_items_page(user_id, 1)[0]
            if run.server is None
            else self._all_of(user_id, run)[:1]
        )
        if left:
            run.passes += 1
            if run.passes >= MAX_PASSES:
                raise ErasureUnfinished(f"items of the person remain after {run.passes} passes")
            run.phase, run.cursor, run.found_in_pass = _ITEMS, None, False
        else:
            run.phase = _DONE

    def _all_of(self, user_id: str, run: _Run, kind: ItemKind | None = None) -> list[ItemRef]:
        """Every item of the person within the run's server (of a kind), page by page."""
        found: list[ItemRef] = []
        cursor: dict[str, Any] | None = None
        while True:
            if kind is None:
                refs, cursor = self._repository.user_items_page(user_id, PAGE, cursor)
            else:
                refs, cursor = self._repository.user_items_page(user_id, PAGE, cursor, kind=kind)
            found += [ref for ref in refs if run.holds(ref)]
            if cursor is None:
                return found

    # Names --------------------------------------------------------------------------

    def _distinctive(self, run: _Run, scope: str, user_id: str) -> list[str]:
        """The person's names that name them alone in this scope (read once per scope)."""
        if scope not in run.distinctive:
            run.distinctive[scope] = [
                name
                for name in run.names
                if is_distinctive(name, self._repository.users_with_name(scope, name), user_id)
            ]
        return run.distinctive[scope]


_LAST = (ItemKind.PROFILE, ItemKind.SPOKE)


def _count_of(kind: ItemKind) -> str:
    return {
        ItemKind.FACT: "facts",
        ItemKind.CANDIDATE: "facts",
        ItemKind.OBSERVATION: "observations",
        ItemKind.PIN: "pins",
    }.get(kind, "other")


def _episode_names(episode: Episode, user_id: str, names: list[str]) -> bool:
    """Whether an episode (or a channel summary) is the person's: they took part, it names
    them, or it is a summary that stopped listing its speakers (in a channel the person
    spoke in, it may hold their words). A name some
    other participant goes by is not theirs here."""
    if isinstance(episode, ChannelSummary) and episode.more_participants:
        return True
    if user_id in episode.participant_ids or mention_pattern(user_id).search(episode.summary):
        return True
    others = {normalized(n) for n in episode.participant_names}
    pattern = names_pattern(n for n in names if normalized(n) not in others)
    return pattern is not None and pattern.search(episode.summary) is not None

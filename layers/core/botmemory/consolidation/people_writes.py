"""A round's per-person writes outside its transaction (botmemory.storage.round_people).

Before the model call: the speakers' `SPOKE#` items (a failure fails the round, which is
retried as any storage failure is; a refused commit takes back those of people barred since). After the commit: their profiles and the registry's new
names, for people not barred by then; a failure is logged and counted (PeopleWritesFailed),
and what was owed stays on the channel's state (the commit put it there), so the channel's
next round writes it before anything else.
"""

from __future__ import annotations

import logging

from botmemory.clock import Clock
from botmemory.consolidation.batch import Batch, speakers_of
from botmemory.consolidation.outcome import Outcome
from botmemory.people.optout import OptOuts
from botmemory.storage.commit import Lock
from botmemory.storage.repository import MemoryRepository
from botmemory.storage.round_people import RoundPeople

log = logging.getLogger(__name__)


class PeopleWriter:
    def __init__(self, repository: MemoryRepository, clock: Clock, opt_outs: OptOuts) -> None:
        self._repository = repository
        self._clock = clock
        self._opt_outs = opt_outs

    def spoken(self, batch: Batch) -> list[tuple[str, str]]:
        """Each speaker's item for this channel, before anything of the round is kept:
        erasure finds the channel's episodes through it (barred people were dropped from
        the batch already). The (scope, person) whose item this round created."""
        speakers = list(speakers_of(batch))
        if not speakers or not batch.observations:
            return []
        channel_id = batch.observations[0].channel_id
        return self._repository.record_spoken(channel_id, speakers, self._clock.now_ms())

    def refused(self, channel_id: str, created: list[tuple[str, str]]) -> None:
        """A refused commit kept nothing of anyone: the items it created for people barred
        since (an opt-out or erasure while the model thought) go again."""
        barred = self._opt_outs.barred({user for _, user in created})
        if barred:
            self._repository.forget_spoken(channel_id, [p for p in created if p[1] in barred])

    def repair(self, lock: Lock) -> None:
        """What the channel's last committed round could not write, written first; a
        failure here fails this round (nothing of it is kept yet) and is tried again."""
        if lock.people_due:
            self._write(lock.channel_id, lock.people_due, late=True)
            log.info(
                "people writes of an earlier round repaired", extra={"channel_id": lock.channel_id}
            )

    def after_commit(self, channel_id: str, owed: str | None, outcome: Outcome) -> None:
        if not owed:
            return
        try:
            self._write(channel_id, owed)
        except Exception as exc:  # the round is committed: its next round writes these
            outcome.people_unwritten = True
            log.warning(
                "profiles and names not written; the channel's next round writes them",
                extra={"channel_id": channel_id, "error": repr(exc)[:300]},
            )

    def _write(self, channel_id: str, owed_json: str, *, late: bool = False) -> None:
        owed = RoundPeople.from_json(owed_json)
        barred = self._opt_outs.barred(owed.user_ids())
        if late:  # an erasure since (its marker gone by now) took their SPOKE# item too
            barred |= owed.user_ids() - self._repository.spoken_in(channel_id, owed.pairs())
        owed = owed.without(barred)
        self._repository.write_round_people(owed)
        self._repository.clear_people_due(channel_id, owed_json)

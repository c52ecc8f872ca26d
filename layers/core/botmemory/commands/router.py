"""Slash commands: members see and control what is kept about them; staff review and steer it;
`/ask` hands a question to the answering function.

Every answer but `/ask`'s is ephemeral; every answer is scrubbed and sent with
`allowed_mentions: {"parse": []}`, so stored text never pings anyone; stored text is shown
through `as_discord_text`, so what one member wrote reaches others as text, never as
formatting, masked links or mentions. Staff rights are checked here from
`member.permissions` on every call, whatever the command's registration says. Work that
may outlast Discord's 3 seconds (erasure, long listings) answers "thinking…" at once and
finishes through the interaction webhook (see `Deferrer`).
`/ask` answers "thinking…" in public (the answer is for the channel) and hands the question
to the injected `Asker`; like every command that does work, it runs behind the handler's
replay protection (it is not in `changes_nothing`), so a replayed interaction asks once.
Every change to a fact made here is kept in its history (botmemory.memory.fact_history).

Personas (botmemory.memory.personas) are configuration staff own (`/memory-staff persona ...`, a
subcommand group); people stay in control of what each persona keeps about them: `/memory
show` lists it by persona, `/memory forget` works on it, staff find it by id like any fact of
their server. A persona's own knowledge is no one's: no member can forget it, staff can.

Notes for direct messages (botmemory.memory.notes) are a server's too (`/memory-staff notes
...`): about no member, so no member's command changes them and erasure leaves them.

This module routes; the commands themselves are in `member.py`, `staff.py`, `personas.py`
and `notes.py`, which share one `CommandContext` (`context.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botmemory.commands import specs as spec
from botmemory.commands.backfill import BackfillCommands
from botmemory.commands.context import CommandContext, Deferrer
from botmemory.commands.controls import (
    CANCEL_CHANNEL_FORGET,
    CHANNEL_FORGET_WORK,
    CONFIRM_CHANNEL_FORGET,
    FORGET_RECENT_WORK,
    ControlCommands,
)
from botmemory.commands.invocation import (
    CommandError,
    Invocation,
    deferred_interaction,
    ephemeral_reply,
    parse_invocation,
    webhook_edit,
)
from botmemory.commands.listing import MAX_LISTED, user_facts_listing
from botmemory.commands.member import (
    CANCEL_ERASE,
    CANCEL_OPTOUT,
    CONFIRM_ERASE,
    CONFIRM_OPTOUT,
    MemberCommands,
)
from botmemory.commands.notes import NotesCommands
from botmemory.commands.paging import SHOW_PAGE, page_number
from botmemory.commands.personas import (
    CANCEL_PURGE_PERSONA,
    CONFIRM_PURGE_PERSONA,
    PersonaCommands,
)
from botmemory.commands.retention import RetentionCommands
from botmemory.commands.server_specs import BACKFILL_ON_JOIN
from botmemory.commands.staff import StaffCommands
from botmemory.commands.zone import ZoneCommands
from botmemory.discord.interactions import InteractionResponseType, InteractionType
from botmemory.services import MemoryServices
from botmemory.text import as_discord_text, clip, scrub

# Commands that work with memory off: erasure, answering, and personas as configuration
# (teaching one writes memory, so it is not among them).
WITHOUT_MEMORY = {
    (spec.FORGETME_COMMAND, "", ""),
    (spec.ASK_COMMAND, "", ""),
    *(
        (spec.STAFF_COMMAND, spec.PERSONA_GROUP, sub)
        for sub in spec.PERSONA_SUBCOMMANDS
        if sub != spec.PERSONA_TEACH
    ),
}
# Commands that only read: no replay protection (see `Commands.changes_nothing`).
READS = {
    (spec.MEMBER_COMMAND, "", spec.SHOW),
    (spec.STAFF_COMMAND, "", spec.USER),
    (spec.STAFF_COMMAND, "", spec.QUARANTINE),
    (spec.STAFF_COMMAND, "", spec.HISTORY),
    (spec.STAFF_COMMAND, spec.PERSONA_GROUP, spec.PERSONA_LIST),
    (spec.STAFF_COMMAND, spec.NOTES_GROUP, spec.NOTES_SHOW),
    (spec.MEMBER_COMMAND, "", spec.PRIVACY),
    (spec.STAFF_COMMAND, spec.CHANNEL_GROUP, spec.CHANNEL_STATUS),
    (spec.STAFF_COMMAND, spec.RETENTION_GROUP, spec.RETENTION_STATUS),
}
# Starts the answer to `/ask`: `{"ask": {"interaction": ..., "question": ...}}`, in Lambda an
# asynchronous invoke of AnswerFunction, which edits the deferred answer.
Asker = Callable[[dict[str, Any]], None]


class Commands:
    """The route table: each command, button and autocomplete request handed to the member,
    staff or persona commands (or to `/ask`), all sharing one `CommandContext`."""

    def __init__(self, services: MemoryServices, defer: Deferrer, ask: Asker | None = None) -> None:
        self._services = services
        self._ask = ask
        self._context = CommandContext(services, defer)
        self._member = MemberCommands(self._context)
        self._staff = StaffCommands(self._context)
        self._personas = PersonaCommands(self._context)
        self._notes = NotesCommands(self._context)
        self._controls = ControlCommands(self._context)
        self._zone = ZoneCommands(self._context)
        self._backfill = BackfillCommands(self._context)
        self._retention = RetentionCommands(self._context)

    # Entry points -------------------------------------------------------------------

    def handle(self, interaction: dict[str, Any]) -> dict[str, Any]:
        """The immediate answer to a command, a button or an autocomplete request."""
        try:
            invocation = parse_invocation(interaction)
            if invocation.kind == InteractionType.APPLICATION_COMMAND_AUTOCOMPLETE:
                return self._autocomplete(invocation)
            if invocation.kind == InteractionType.MESSAGE_COMPONENT:
                return self._component(invocation)
            if invocation.kind == InteractionType.APPLICATION_COMMAND:
                return self._command(invocation)
            return ephemeral_reply("This kind of interaction is not supported.")
        except CommandError as refusal:
            return ephemeral_reply(str(refusal))

    def changes_nothing(self, interaction: dict[str, Any]) -> bool:
        """Reads (show, listings, autocomplete) need no replay protection, and their answers,
        which quote what is kept, are better not stored for it."""
        try:
            invocation = parse_invocation(interaction)
        except CommandError:
            return True
        if invocation.kind == InteractionType.APPLICATION_COMMAND_AUTOCOMPLETE:
            return True
        return invocation.kind == InteractionType.APPLICATION_COMMAND and invocation.path in READS

    def finish(
        self, job: dict[str, Any], time_left_ms: Callable[[], int] | None = None
    ) -> dict[str, Any]:
        """Do deferred work; the result is the body that replaces the "thinking…" answer.

        An erasure that runs short of time (`time_left_ms`) hands the rest to another
        deferred job, from its checkpoint, and says how far it got."""
        invocation = parse_invocation(job["interaction"])
        work = job.get("work")
        if work in ("erase", "optout"):
            return self._member.erase(job, invocation, time_left_ms)
        if work == "staff_user":
            return webhook_edit(
                user_facts_listing(
                    self._services, invocation.scope, invocation.snowflake(spec.OPTION_MEMBER)
                )
            )
        if work == FORGET_RECENT_WORK:
            return self._controls.finish_forget_recent(job, invocation, time_left_ms)
        if work == CHANNEL_FORGET_WORK:
            return self._controls.finish_channel_forget(job, invocation, time_left_ms)
        if work == "persona_purge" and invocation.guild_id is not None:
            answer = self._personas.purge_confirmed(
                invocation.guild_id, str(job.get("persona_id")), str(job.get("lineage_id"))
            )
            return webhook_edit(answer, components=[])
        return webhook_edit("Sorry, I lost track of that request.")

    # Commands -----------------------------------------------------------------------

    def _command(self, invocation: Invocation) -> dict[str, Any]:
        member, staff, personas = self._member, self._staff, self._personas
        persona = (spec.STAFF_COMMAND, spec.PERSONA_GROUP)
        notes = (spec.STAFF_COMMAND, spec.NOTES_GROUP)
        routes: dict[tuple[str, str, str], Callable[[Invocation], dict[str, Any]]] = {
            (spec.MEMBER_COMMAND, "", spec.SHOW): member.show,
            (spec.MEMBER_COMMAND, "", spec.REMEMBER): member.remember,
            (spec.MEMBER_COMMAND, "", spec.FORGET): member.forget,
            (spec.MEMBER_COMMAND, "", spec.OPTOUT): member.optout,
            (spec.MEMBER_COMMAND, "", spec.OPTIN): member.optin,
            (spec.FORGETME_COMMAND, "", ""): member.forgetme,
            (spec.STAFF_COMMAND, "", spec.USER): staff.user,
            (spec.STAFF_COMMAND, "", spec.FORGET_FACT): staff.forget_fact,
            (spec.STAFF_COMMAND, "", spec.RESTORE_FACT): staff.restore_fact,
            (spec.STAFF_COMMAND, "", spec.PIN): staff.pin,
            (spec.STAFF_COMMAND, "", spec.UNPIN): staff.unpin,
            (spec.STAFF_COMMAND, "", spec.QUARANTINE): staff.quarantine,
            (spec.STAFF_COMMAND, "", spec.HISTORY): staff.history,
            (spec.STAFF_COMMAND, "", spec.RESET_SUMMARY): staff.reset_summary,
            (*persona, spec.PERSONA_SET): personas.set_persona,
            (*persona, spec.PERSONA_LIST): personas.list_personas,
            (*persona, spec.PERSONA_REMOVE): personas.remove_persona,
            (*persona, spec.PERSONA_PURGE): personas.purge_persona,
            (*persona, spec.PERSONA_TEACH): personas.teach_persona,
            (*notes, spec.NOTES_SET): self._notes.set_notes,
            (*notes, spec.NOTES_SHOW): self._notes.show_notes,
            (*notes, spec.NOTES_CLEAR): self._notes.clear_notes,
            (spec.ASK_COMMAND, "", ""): self._ask_question,
            **self._control_routes(),
            (spec.STAFF_COMMAND, "", spec.TIMEZONE): self._zone.timezone,
            **self._backfill_routes(),
        }
        route = routes.get(invocation.path)
        if route is None:
            label = scrub(invocation.label)
            return ephemeral_reply(f"Sorry, I don't know the command `{clip(label, 60)}`.")
        if invocation.command == spec.STAFF_COMMAND and not invocation.is_staff:
            return ephemeral_reply(
                "Only members with the Manage Server permission can use this command."
            )
        if invocation.path not in WITHOUT_MEMORY and not self._services.settings.memory_enabled:
            return ephemeral_reply("Memory is off on this bot: nothing is kept about anyone.")
        return route(invocation)

    def _control_routes(self) -> dict[tuple[str, str, str], Callable[[Invocation], dict[str, Any]]]:
        """Members' and staff's controls over what is kept (botmemory.commands.controls)."""
        controls = self._controls
        channel = (spec.STAFF_COMMAND, spec.CHANNEL_GROUP)
        return {
            (spec.MEMBER_COMMAND, "", spec.OPTIN): self._optin,
            (spec.MEMBER_COMMAND, "", spec.PRIVACY): controls.privacy,
            (spec.MEMBER_COMMAND, "", spec.PAUSE): controls.pause,
            (spec.MEMBER_COMMAND, "", spec.FORGET_RECENT): controls.forget_recent,
            (spec.MEMBER_COMMAND, "", spec.EXPORT): self._export,
            (*channel, spec.CHANNEL_OFF): controls.channel_off,
            (*channel, spec.CHANNEL_ON): controls.channel_on,
            (*channel, spec.CHANNEL_STATUS): controls.channel_status,
            (*channel, spec.CHANNEL_FORGET): controls.channel_forget,
            (spec.STAFF_COMMAND, "", spec.CONSENT): controls.consent,
            **{
                (spec.STAFF_COMMAND, spec.RETENTION_GROUP, kind): self._retention.set_days
                for kind in spec.RETENTION_KINDS
            },
            (spec.STAFF_COMMAND, spec.RETENTION_GROUP, spec.RETENTION_STATUS): (
                self._retention.status
            ),
            (spec.STAFF_COMMAND, spec.RETENTION_GROUP, spec.RETENTION_LEAVERS): (
                self._retention.leavers
            ),
        }

    def _backfill_routes(
        self,
    ) -> dict[tuple[str, str, str], Callable[[Invocation], dict[str, Any]]]:
        backfill = (spec.STAFF_COMMAND, spec.BACKFILL_GROUP)
        return {
            (*backfill, spec.BACKFILL_START): self._backfill.start,
            (*backfill, spec.BACKFILL_STATUS): self._backfill.status,
            (*backfill, spec.BACKFILL_CANCEL): self._backfill.cancel,
            (*backfill, BACKFILL_ON_JOIN): self._backfill.on_join,
        }

    def _export(self, invocation: Invocation) -> dict[str, Any]:
        if self._ask is None:
            return ephemeral_reply("Exports need answering, which is not set up on this bot.")
        return self._controls.export(invocation, self._ask)

    def _optin(self, invocation: Invocation) -> dict[str, Any]:
        """`/memory optin`: recorded again, and (in a server) agreeing to be recorded there."""
        answer = self._member.optin(invocation)
        self._controls.agree_here(invocation)
        return answer

    def _component(self, invocation: Invocation) -> dict[str, Any]:
        if invocation.custom_id == CANCEL_PURGE_PERSONA:
            return {
                "type": InteractionResponseType.UPDATE_MESSAGE,
                "data": webhook_edit("Cancelled: nothing was purged.", components=[]),
            }
        if invocation.custom_id.startswith(SHOW_PAGE):  # the presser's own, read again
            return self._member.show(invocation, page_number(invocation.custom_id), pressed=True)
        if invocation.custom_id == CANCEL_CHANNEL_FORGET:
            return {
                "type": InteractionResponseType.UPDATE_MESSAGE,
                "data": webhook_edit("Cancelled: nothing was erased.", components=[]),
            }
        if invocation.custom_id.startswith(CONFIRM_CHANNEL_FORGET):
            return self._controls.confirm_channel_forget(invocation)
        if invocation.custom_id.startswith(CONFIRM_PURGE_PERSONA):
            return self._personas.confirm_purge(invocation)
        if invocation.custom_id in (CANCEL_ERASE, CANCEL_OPTOUT):
            return {
                "type": InteractionResponseType.UPDATE_MESSAGE,
                "data": webhook_edit("Cancelled: nothing was erased.", components=[]),
            }
        if invocation.custom_id in (CONFIRM_ERASE, CONFIRM_OPTOUT):
            return self._member.confirm_erasure(invocation)
        return ephemeral_reply("That button has expired.")

    # Asking -------------------------------------------------------------------------

    def _ask_question(self, invocation: Invocation) -> dict[str, Any]:
        """Hand the question to the answering function; the answer is for the channel, so
        the "thinking…" answer is public. A replay of this interaction gets the stored
        response from the handler's replay protection and asks nothing."""
        if self._ask is None:
            return ephemeral_reply("Answering is not set up on this bot.")
        question = scrub(invocation.text(spec.OPTION_QUESTION), keep_newlines=True)
        if not question:
            raise CommandError("That question is empty once invisible characters are removed.")
        if len(question) > spec.MAX_QUESTION_LENGTH:
            raise CommandError(
                f"Please keep a question to {spec.MAX_QUESTION_LENGTH} characters "
                f"(yours has {len(question)})."
            )
        self._ask({"ask": {"interaction": deferred_interaction(invocation), "question": question}})
        return {"type": InteractionResponseType.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE}

    # Autocomplete -------------------------------------------------------------------

    def _autocomplete(self, invocation: Invocation) -> dict[str, Any]:
        typed = str(invocation.options.get(invocation.focused or "", "") or "").lower()
        choices: list[tuple[str, str]] = []
        if invocation.path == (spec.MEMBER_COMMAND, "", spec.FORGET):
            choices = [(f.fact_id, f.text) for f in self._member.my_facts(invocation)]
        elif invocation.command == spec.STAFF_COMMAND and invocation.is_staff:
            if invocation.group == spec.PERSONA_GROUP:
                choices = self._personas.choices(invocation)
            elif invocation.subcommand == spec.UNPIN:
                choices = self._staff.pin_choices(invocation)
            elif invocation.subcommand in (spec.FORGET_FACT, spec.HISTORY) and typed:
                fact = self._context.fact_here(invocation, typed)
                choices = [(fact.fact_id, fact.text)] if fact else []
            elif invocation.subcommand == spec.RESTORE_FACT:
                choices = self._staff.demoted_choices(invocation, typed)
        matches = [
            # Choice names are plain text to Discord: only mentions need defusing.
            {
                "name": clip(f"{item_id}: {as_discord_text(scrub(text), markdown=False)}", 100),
                "value": item_id,
            }
            for item_id, text in choices
            if not typed or item_id.startswith(typed) or typed in text.lower()
        ]
        return {
            "type": InteractionResponseType.APPLICATION_COMMAND_AUTOCOMPLETE_RESULT,
            "data": {"choices": matches[:MAX_LISTED]},
        }

"""Wiring: one place that builds the services a handler or a local run needs."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from botmemory.clock import Clock, SystemClock
from botmemory.consolidation.consolidator import Consolidator
from botmemory.consolidation.model import MemoryModel, build_memory_model
from botmemory.consolidation.work import WorkDispatcher, WorkQueue
from botmemory.ingest.observe import ObservationRecorder
from botmemory.memory.notes import DmNotes, OpsSource
from botmemory.memory.personas import PersonaDirectory, deployment_source
from botmemory.people.optout import OptOuts
from botmemory.people.retention import RetentionReader
from botmemory.recall.recaller import Recaller
from botmemory.recall.search_leg import SearchLeg
from botmemory.records import Persona
from botmemory.search import SearchIndex, build_search_index
from botmemory.search.index_sync import IndexFollower, IndexWriter
from botmemory.services import MemoryServices
from botmemory.settings.config import ConfigError, Settings, get_settings
from botmemory.storage.repository import MemoryRepository, open_repository

if TYPE_CHECKING:
    from botmemory.answering.answerer import Answerer
    from botmemory.answering.requests import AnswerRequests
    from botmemory.catchup.worker import CatchUp
    from botmemory.discord.rest import DiscordApi
    from botmemory.people.departures import DepartureReport


def build_services(
    settings: Settings | None = None,
    *,
    dynamodb: Any | None = None,
    clock: Clock | None = None,
    model: MemoryModel | None = None,
    search_index: SearchIndex | None = None,
    deployment_personas: Callable[[], list[Persona]] | None = None,
    dm_notes: OpsSource | None = None,
) -> MemoryServices:
    """Build the services; anything not given comes from the environment and the system clock
    (the search index from MEMORY_SEARCH_INDEX, only when memory is on; the deployment's
    personas from PERSONAS_PARAMETER, its notes for direct messages from DM_NOTES_PARAMETER)."""
    settings = settings or get_settings()
    clock = clock or SystemClock()
    if model is None:
        model = build_memory_model(settings)
    repository = open_repository(settings.table_name, dynamodb)
    opt_outs = OptOuts(repository, clock)
    if search_index is None and settings.memory_enabled:
        search_index = build_search_index(settings, repository, clock)
    # What the keyword leg misses goes back through the work queue, where a function has one.
    retry = (
        WorkQueue(settings.consolidate_queue_url, clock).send_keyword_retries
        if settings.consolidate_queue_url
        else None
    )
    writer = IndexWriter(search_index, repository, clock, retry) if search_index else None
    leg = SearchLeg(search_index, repository, settings) if search_index else None
    personas = PersonaDirectory(repository, deployment_personas or deployment_source(settings))
    return MemoryServices(
        settings=settings,
        clock=clock,
        repository=repository,
        opt_outs=opt_outs,
        recorder=ObservationRecorder(repository, settings, clock, opt_outs),
        consolidator=Consolidator(
            repository, settings, model, clock, opt_outs, writer, personas=personas
        ),
        recaller=Recaller(
            repository,
            settings,
            clock,
            leg,
            personas=personas,
            notes=DmNotes(repository, settings, dm_notes),
        ),
        search_index=search_index,
        index_follower=IndexFollower(search_index) if search_index else None,
        personas=personas,
        retention=RetentionReader(repository, settings, clock),
    )


@lru_cache(maxsize=1)
def services_from_environment() -> MemoryServices:
    """The services of this process, built on first use and reused across warm invocations."""
    return build_services()


@lru_cache(maxsize=1)
def answerer_from_environment() -> Answerer:
    """AnswerFunction's answerer: the chat model, Discord's REST API with the bot token (from
    Secrets Manager, cached), the rate limiter and the prompt template, built once."""
    from botmemory.answering.answerer import Answerer
    from botmemory.answering.chat import build_chat_model
    from botmemory.answering.prompt import system_prompt_source
    from botmemory.answering.rate import AnswerRateLimiter
    from botmemory.discord.rest import (
        DiscordApi,
        api_base_from_environment,
        bot_token_from_environment,
    )
    from botmemory.invocation import time_left_ms

    services = services_from_environment()
    settings = services.settings
    # Rate-limit waits stop short of the invocation's end (the handler calls begin()).
    discord = DiscordApi(
        bot_token_from_environment(),
        base_url=api_base_from_environment(),
        time_left_ms=time_left_ms,
    )
    return Answerer(
        services,
        build_chat_model(settings),
        discord,
        AnswerRateLimiter(services.repository, settings, services.clock),
        system_prompt_source(settings),
        # The answer after a correction is not asked for when it cannot fit.
        time_left_ms=time_left_ms,
    )


@lru_cache(maxsize=1)
def discord_from_environment() -> DiscordApi:
    """AnswerFunction's Discord client for exports (botmemory.answering.exports): the bot
    token from Secrets Manager, waits bounded by the invocation's time left."""
    from botmemory.discord.rest import (
        DiscordApi,
        api_base_from_environment,
        bot_token_from_environment,
    )
    from botmemory.invocation import time_left_ms

    return DiscordApi(
        bot_token_from_environment(),
        base_url=api_base_from_environment(),
        time_left_ms=time_left_ms,
    )


def departures_from_environment(
    repository: MemoryRepository, now_ms: int, time_left_ms: Callable[[], int]
) -> DepartureReport:
    """ServerPurgeFunction's erasure of members who left (botmemory.people.departures), with
    the GUILD_MEMBERS intent only: the erasure as /forgetme's (the person hash's key, every
    persona of the server), Discord asked with the bot token whether each is gone."""
    from botmemory.people.departures import DepartureReport, erase_departed
    from botmemory.people.erasure import Eraser

    settings = get_settings()
    if not settings.guild_members_intent:
        return DepartureReport()
    clock = SystemClock()
    personas = PersonaDirectory(repository, deployment_source(settings))
    eraser = Eraser(
        repository,
        clock,
        OptOuts(repository, clock).hash_of,
        settle_ms=settings.lock_lease_seconds * 1000,
        lineages=personas.lineages_of,
    )
    discord = discord_from_environment()
    return erase_departed(
        repository, eraser, discord.guild_member_present, now_ms, time_left_ms=time_left_ms
    )


@lru_cache(maxsize=1)
def answer_requests_from_environment() -> AnswerRequests:
    """How this process starts answers (ANSWER_FUNCTION); inert when it is unset."""
    from botmemory.answering.requests import AnswerRequests

    return AnswerRequests(get_settings())


@lru_cache(maxsize=1)
def work_dispatcher_from_environment() -> WorkDispatcher:
    """How this process hands channels' work to ConsolidateWorkerFunction's queue
    (CONSOLIDATE_QUEUE_URL). Only the table and the queue: no model, no hash key."""
    settings = get_settings()
    if not settings.consolidate_queue_url:
        raise ConfigError("CONSOLIDATE_QUEUE_URL is not set: consolidation work has no queue")
    clock = SystemClock()
    repository = open_repository(settings.table_name)
    return WorkDispatcher(WorkQueue(settings.consolidate_queue_url, clock), repository, clock)


@lru_cache(maxsize=1)
def catch_up_from_environment() -> CatchUp:
    """CatchUpFunction's work (botmemory.catchup): the ingest path, the relay's gaps, the
    catch-up queue (CATCHUP_QUEUE_URL) and Discord's REST API with the bot token, built on
    the first page (planning needs no token)."""
    from botmemory.catchup.tasks import TaskQueue
    from botmemory.catchup.worker import CatchUp
    from botmemory.discord.history import HistoryApi
    from botmemory.discord.rest import api_base_from_environment, bot_token_from_environment
    from botmemory.invocation import time_left_ms
    from botmemory.storage.catchup import CatchUpStore

    services = services_from_environment()
    settings = services.settings
    if not settings.catchup_queue_url:
        raise ConfigError("CATCHUP_QUEUE_URL is not set: catching up has no queue")

    @lru_cache(maxsize=1)
    def history() -> HistoryApi:
        return HistoryApi(
            bot_token_from_environment(),
            base_url=api_base_from_environment(),
            time_left_ms=time_left_ms,
            # A longer wait goes back to the queue as a delayed message, not a sleep.
            max_retry_wait=2.0,
        )

    return CatchUp(
        services.recorder,
        CatchUpStore(services.repository.client, services.repository.table_name),
        TaskQueue(settings.catchup_queue_url),
        history,
        services.clock,
        services.opt_outs.hash_of,
    )


def forget_environment() -> None:
    """Drop everything built from the environment (a local run or a test that changes it
    starts over, as a new Lambda sandbox would)."""
    get_settings.cache_clear()
    services_from_environment.cache_clear()
    answerer_from_environment.cache_clear()
    discord_from_environment.cache_clear()
    answer_requests_from_environment.cache_clear()
    work_dispatcher_from_environment.cache_clear()
    catch_up_from_environment.cache_clear()

"""The pipeline's stages, each built once, at start, from the configuration and the
stages before it: one function per stage.

They are built in this order (``Pipeline.__init__``), each from those before it: send
(the broker connections), journal, outcome, the spool's store and policy, the topic
registry and the appender (the intake's records of new topics and of batches opened and
sealed), the topic manager's changes and the journal calls (``journalling.py``), batch
(the topic manager), admit (the intake), the journalled writer, and the spooler; the read
stage comes last, at start, once the sockets are open.  A message meets them in the order of
``pipeline/flow.py``'s table, which is not this one: a stage is built after the stages it
calls.

Nothing is wired in afterwards: a stage gets every part it calls in its constructor, and
no stage is given a callable to call back up (the compiled admitter's declared call-outs
aside, and the drivers' one declared hook into the journal, ``SendJournal``); what the
core did, it writes down, and the pipeline takes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pulsar_bruce.config import Config
from pulsar_bruce.config.names import stable_producer_name
from pulsar_bruce.connection.pool import ConnectionPool
from pulsar_bruce.connection.security import ConnectionSecurity
from pulsar_bruce.metrics.discard_log import discard_log_of
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.parse.deliver_at import epoch_ms
from pulsar_bruce.producer.delivery import DeliveryPolicy, SendJournal
from pulsar_bruce.route.appender import Appender
from pulsar_bruce.route.intake import Intake
from pulsar_bruce.route.outcomes import BatchObserver, Outcomes
from pulsar_bruce.route.registry import TopicRegistry
from pulsar_bruce.route.topic_settings import TopicConfigurator
from pulsar_bruce.spool.journal import Journal
from pulsar_bruce.spool.journal_stage import NO_JOURNAL, JournalStage
from pulsar_bruce.spool.policy import SpoolPolicy
from pulsar_bruce.spool.spooler import BatchWriter, Spooler
from pulsar_bruce.spool.store import SpoolStore
from pulsar_bruce.topics.manager import TopicChanges, TopicManager


def send_stage(config: Config, security: ConnectionSecurity) -> ConnectionPool:
    """send: the broker connections, one per broker, shared by its partitions' producers."""
    return ConnectionPool(
        config.service_url,
        ssl_context=security.ssl_context,
        auth=security.auth,
        advertised_listener=config.advertised_listener,
    )


def journal_stage(config: Config) -> JournalStage:
    """journal: the write-ahead journal with ``--spool-dir`` (and ``--spool-journal``), else
    the stage that writes nothing."""
    if config.spool_dir and config.spool_journal:
        return Journal(config.spool_dir, config.spool_fsync)
    return NO_JOURNAL


def outcome_stage(config: Config, ledger: Ledger, observer: BatchObserver | None) -> Outcomes:
    """outcome: where every message ends, acked or discarded with a reason (and the
    ``--discard-log`` evidence of the latter); it writes down what it settled."""
    return Outcomes(ledger, discard_log_of(config), observer)


def spool_store(config: Config) -> SpoolStore | None:
    """The disk spool with ``--spool-dir``, else None."""
    if not config.spool_dir:
        return None
    return SpoolStore(config.spool_dir, config.spool_max_bytes, config.spool_fsync)


def spool_policy(
    config: Config, ledger: Ledger, store: SpoolStore | None, outcomes: Outcomes
) -> SpoolPolicy:
    """admit's memory-or-disk decision for every message."""
    return SpoolPolicy(
        ledger,
        config.buffer_max_bytes,
        store,
        config.spool_after_s,
        refusals=outcomes,
    )


def topic_registry(settings: TopicConfigurator) -> TopicRegistry:
    """The topics seen so far; a new one gets its per-topic settings at once."""
    return TopicRegistry(settings)


def batch_stage(
    config: Config,
    pool: ConnectionPool,
    outcomes: Outcomes,
    settings: TopicConfigurator,
    send_journal: SendJournal,
    registry: TopicRegistry,
    appender: Appender,
    changes: TopicChanges,
    clock: Callable[[], float] = time.monotonic,
    wall_ms: Callable[[], int] = epoch_ms,
) -> TopicManager:
    """batch, frame and receipt: the topics, their partitions' producers and drivers (which
    get ``send_journal``, their hook into the journal); what the journal must know is
    written down in ``changes``."""
    return TopicManager(
        pool,
        outcomes,
        settings,
        DeliveryPolicy(
            receipt_timeout_s=config.receipt_timeout_s,
            send_timeout_s=config.send_timeout_s,
            max_send_attempts=config.max_send_attempts,
        ),
        registry,
        appender,
        producer_name=stable_producer_name(config.producer_name_prefix, config.socket),
        metadata_refresh_s=config.metadata_refresh_s,
        changes=changes,
        send_journal=send_journal,
        clock=clock,
        wall_ms=wall_ms,
    )


def admit_stage(
    registry: TopicRegistry,
    appender: Appender,
    ledger: Ledger,
    policy: SpoolPolicy,
    outcomes: Outcomes,
    settings: TopicConfigurator,
    wall_ms: Callable[[], int] = epoch_ms,
) -> Intake:
    """admit: validate, route and append each message, or discard it with a reason."""
    return Intake(
        registry,
        appender,
        ledger,
        policy,
        outcomes,
        max_message_bytes=settings.largest_message_bytes(),
        clock_ms=wall_ms,
    )


def spooler_stage(
    store: SpoolStore | None,
    policy: SpoolPolicy,
    intake: Intake,
    pool: ConnectionPool,
    writer: BatchWriter,
    clock: Callable[[], float] = time.monotonic,
) -> Spooler | None:
    """The spool's replay and durability ticks (with a spool): replayed messages are
    admitted again, the way new ones are, and journalled and written (``writer``) before
    the spool lets them go."""
    if store is None:
        return None
    return Spooler(
        store,
        policy,
        intake,
        brokers=pool,
        writer=writer,
        clock=clock,
    )

"""The shutdown's wait for receipts, and what becomes of the messages it leaves: spooled
at the front of the spool (:func:`spool_records_of`), else discarded.

The wait says up front what it waits for and for how long: with the broker
down it lasts the whole ``--shutdown-timeout-s``, and a silent pause reads as
a hang (a second SIGINT or SIGTERM ends it, and the line says so).  What is
left at its end is ``shutdown``'s, never ``send_timeout``'s: the topic manager
stops the send timeouts when the shutdown starts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from pulsar_bruce import reasons
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.route.outcomes import Outcomes
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.spool.spooler import Spooler

log = logging.getLogger(__name__)

_POLL_S = 0.02


async def wait_for_receipts(
    ledger: Ledger,
    timeout_s: float,
    stop_now: asyncio.Event,
    spool: bool,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Wait until what memory holds is acknowledged, ``timeout_s`` at most (on ``clock``),
    or ``stop_now``."""
    waiting = ledger.buffered_messages - ledger.spooled_messages
    if waiting <= 0 or timeout_s <= 0 or stop_now.is_set():
        return
    log.info(
        "waiting up to %g s (--shutdown-timeout-s) for the broker to acknowledge %d "
        "buffered messages, then %s the rest; a second Ctrl-C or SIGTERM stops now",
        timeout_s,
        waiting,
        "spooling" if spool else "discarding",
    )
    deadline = clock() + timeout_s
    while (
        ledger.buffered_messages > ledger.spooled_messages
        and clock() < deadline
        and not stop_now.is_set()
    ):
        await asyncio.sleep(_POLL_S)


def keep_or_discard_the_rest(
    topics: Iterable[Topic],
    ledger: Ledger,
    outcomes: Outcomes,
    spooler: Spooler | None,
    cut_short: bool,
) -> None:
    """Unacked messages go to the front of the spool if there is one (and room), else
    they are discarded as ``shutdown``."""
    topics = list(topics)
    why = "shutdown cut short" if cut_short else "shutdown timeout"
    if spooler is not None:
        spooler.stop()  # what the disk refuses of what it held is in memory: in the front
        front, count, charge = spool_records_of(topics)
        if spooler.shutdown(front):
            forget_buffered(topics)
            ledger.to_disk(count, charge)
            log.warning("%s: %d unacknowledged messages kept in the spool", why, count)
    left = outcomes.discard_everything(topics, reasons.SHUTDOWN)
    if left:
        log.warning("%s: discarded %d unacknowledged messages", why, left)


def spool_records_of(topics: Iterable[Topic]) -> tuple[list[bytes], int, int]:
    """Shutdown with a spool: every buffered message as spool records, oldest first per
    partition, with their message count and memory charge (nothing is removed yet)."""
    front: list[bytes] = []
    count = charge = 0
    for topic in topics:
        records, messages, bytes_charged = topic.spool_records()
        front += records
        count += messages
        charge += bytes_charged
    return front, count, charge


def forget_buffered(topics: Iterable[Topic]) -> None:
    """After :func:`spool_records_of` was written: memory holds none of it any more."""
    for topic in topics:
        topic.forget_spooled()

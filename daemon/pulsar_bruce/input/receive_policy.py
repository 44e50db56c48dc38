"""Where and how eagerly the datagram socket is read, from the kernel queue's length.

The compiled reader's receive thread and either reader's linger after a small slab
(``socket_reader.py``) are decided once, at start, from ``net.unix.max_dgram_qlen``:
these are those decisions, apart from the readers that follow them.
"""

from __future__ import annotations

#: The length of a new UNIX datagram socket's kernel queue (Linux).
QLEN_PATH = "/proc/sys/net/unix/max_dgram_qlen"
#: A kernel queue this deep gets the receive thread, and either reader lingers (below);
#: a shorter one (the default 10: senders would block while the daemon lingers, and could
#: not run ahead of a second core anyway) is read on the event loop as datagrams come.
DEEP_QLEN = 128
#: The read linger's bounds.  At a moderate rate (16 senders at 1,000 msg/s each) the
#: daemon woke for every second datagram: each wake-up (the thread's poll, the loop's
#: epoll, a drain, its Python calls) cost more than the datagrams it brought.  A reader
#: that took a small slab waits this long before it reads again, so a wake-up brings
#: tens; the messages wait for their batch anyway (``batch_max_delay_ms``).
LINGER_MAX_US = 2000
LINGER_MIN_US = 50

#: Where the compiled reader reads (``thread`` or ``loop``) instead of choosing by the
#: kernel queue's length: for tests and measurements.
RECEIVE_ENV = "PULSAR_BRUCE_RECEIVE"


def read_linger_us(qlen: int | None, batch_delay_ms: float) -> int:
    """How long a reader that took a small slab waits before it reads again, for a kernel
    queue of ``qlen`` datagrams (0: it reads as datagrams come): a fifth of the batch
    delay, within ``LINGER_MIN_US``..``LINGER_MAX_US``.  512 queued datagrams outlast the
    longest linger up to 250,000 msg/s, so senders do not block for it."""
    if qlen is None or qlen < DEEP_QLEN:
        return 0
    return int(min(LINGER_MAX_US, max(LINGER_MIN_US, batch_delay_ms * 1000 / 5)))


def receive_on_thread(qlen: int | None, forced: str | None = None) -> bool:
    """Whether the compiled reader runs its receive thread for a kernel queue of ``qlen``
    (``forced``: ``thread`` or ``loop``, from :data:`RECEIVE_ENV`)."""
    if forced in ("thread", "loop"):
        return forced == "thread"
    return qlen is not None and qlen >= DEEP_QLEN


def kernel_queue_length(path: str = QLEN_PATH) -> int | None:
    """``net.unix.max_dgram_qlen`` now (the socket took it when it was created), or None."""
    try:
        with open(path) as file:
            return int(file.read())
    except (OSError, ValueError):
        return None

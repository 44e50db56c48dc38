"""File descriptors: stream connections never take the last ones.

Each stream connection holds a descriptor; were they all taken, ``/metrics``,
new broker connections and the spool's files would fail with ``EMFILE``, and
nothing would say why.  At start the soft ``RLIMIT_NOFILE`` is raised to the
hard one (as servers commonly do), and the stream connection cap is lowered, if
it must be, so that :data:`RESERVE` descriptors stay free for everything else.
"""

from __future__ import annotations

import os
import resource

#: Descriptors kept for /metrics, broker connections, the spool and the journal.
RESERVE = 64
#: A hard limit of "unlimited" is not taken literally.
_CEILING = 1 << 20


def raise_soft_limit() -> int:
    """The soft ``RLIMIT_NOFILE``, raised to the hard one where allowed; returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _CEILING if hard == resource.RLIM_INFINITY else min(hard, _CEILING)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass  # a container may refuse: keep the soft limit
    return int(soft) if soft != resource.RLIM_INFINITY else _CEILING


def in_use() -> int:
    """Descriptors open in this process now."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # the listing's own
    except OSError:
        return 16


def stream_connection_cap(requested: int, limit: int, used: int) -> int:
    """``requested`` stream connections, or fewer so that :data:`RESERVE` stay free
    (at least one)."""
    return max(1, min(requested, limit - used - RESERVE))

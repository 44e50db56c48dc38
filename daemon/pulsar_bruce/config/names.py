"""Producer names: stable across restarts, unique per host and socket.

The broker keeps deduplication state per producer name (pulsar-broker
``MessageDeduplication``), so two daemons sharing a name could have one's
messages dropped as duplicates of the other's; the name carries the host and the
socket so one configuration on many hosts still gives every daemon its own.
"""

from __future__ import annotations

import hashlib
import socket


def stable_producer_name(prefix: str, socket_path: str) -> str | None:
    """The producer name used on every partition, the same after a restart.

    ``<prefix>-<host>-<hash of the socket path>`` (``auto``: prefix ``pulsar-bruce``), so
    hosts sharing one configuration, and daemons on one host, get names of their own
    (a shared name lets broker deduplication drop one daemon's messages as the other's);
    empty: none, the broker names producers.
    """
    if not prefix:
        return None
    digest = hashlib.sha1(socket_path.encode(), usedforsecurity=False).hexdigest()[:6]
    base = "pulsar-bruce" if prefix == "auto" else prefix
    return f"{base}-{socket.gethostname()}-{digest}"

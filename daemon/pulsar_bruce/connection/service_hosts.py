"""The hosts of a service URL: the order each lookup asks them in, and those set aside.

A service URL that names several brokers is a list of doors into one cluster;
a door that is shut says nothing about the topic asked for.  So every lookup
(and metadata request) asks each host at most once, in its own order, before
it fails: concurrent lookups never share one walk through the hosts, which let
two of eight lookups meet the same dead host twice and fail while another host
answered.  Each order starts at the next host in turn, spreading lookups as the
Java client's ``PulsarServiceNameResolver.resolveHost`` does.

A host whose connection was refused is set aside, as that resolver's
``markHostAvailability`` quarantines it: asked only after every other host,
for a while that starts at :data:`FIRST_ASIDE_S` and doubles with each failure
after it came back, up to :data:`MAX_ASIDE_S`; an answer clears it.  Unlike
the Java client (whose quarantine is off unless ``serviceUrlQuarantine*`` is
set, and which then skips the host entirely), a host set aside is still asked
last, so a lookup fails only when no host at all can be reached (see
:class:`ServiceUnreachable`).  Sans-IO: the pool passes its clock in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

log = logging.getLogger("pulsar_bruce.connection.pool")

Host = tuple[str, int]

#: How long a host that refused is first set aside.
FIRST_ASIDE_S = 1.0
#: The longest a host is set aside after refusing again and again.
MAX_ASIDE_S = 60.0


class ServiceUnreachable(ConnectionError):
    """No host of the service URL could be reached: the whole cluster is out of reach (as
    opposed to one broker down among several)."""


@dataclass(slots=True)
class _Aside:
    until: float
    duration: float


class ServiceHosts:
    """The hosts of one service URL, the turn, and which are set aside until when."""

    def __init__(
        self,
        hosts: Sequence[Host],
        clock: Callable[[], float],
        first_aside_s: float = FIRST_ASIDE_S,
        max_aside_s: float = MAX_ASIDE_S,
    ):
        if not hosts:
            raise ValueError("a service URL has at least one host")
        self.hosts = tuple(hosts)
        self._clock = clock
        self._first_aside_s = first_aside_s
        self._max_aside_s = max_aside_s
        self._turn = 0
        self._aside: dict[Host, _Aside] = {}

    def order(self) -> list[Host]:
        """Every host once, for one lookup: those not set aside first, from the next in turn;
        then those set aside, the one back soonest first."""
        start = self._turn
        self._turn = (start + 1) % len(self.hosts)
        rotated = self.hosts[start:] + self.hosts[:start]
        now = self._clock()
        aside = sorted(
            (host for host in rotated if self.is_aside(host, now)),
            key=lambda host: self._aside[host].until,
        )
        return [host for host in rotated if host not in aside] + aside

    def is_aside(self, host: Host, now: float | None = None) -> bool:
        entry = self._aside.get(host)
        return entry is not None and (self._clock() if now is None else now) < entry.until

    def refused(self, host: Host) -> None:
        """``host`` could not be reached: set it aside (again, for twice as long, when it
        refuses after its time was up; unchanged while it is aside already, so concurrent
        lookups that shared one refused attempt count it once)."""
        now = self._clock()
        entry = self._aside.get(host)
        if entry is not None and now < entry.until:
            return
        duration = (
            self._first_aside_s if entry is None else min(entry.duration * 2, self._max_aside_s)
        )
        self._aside[host] = _Aside(now + duration, duration)
        if len(self.hosts) > 1:
            log.info("service host %s:%d refused; asked last for the next %g s", *host, duration)

    def answered(self, host: Host) -> None:
        """``host`` was reached: it is no longer set aside, and its next refusal starts over."""
        if self._aside.pop(host, None) is not None and len(self.hosts) > 1:
            log.info("service host %s:%d answers again", *host)

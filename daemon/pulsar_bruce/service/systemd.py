"""systemd integration over the standard library (no libsystemd).

Two small protocols:

- **notify** (``sd_notify``): one datagram of ``KEY=value`` lines sent to the
  AF_UNIX socket named by ``$NOTIFY_SOCKET`` (a path, or ``@name`` for the
  abstract namespace).  The daemon sends ``READY=1`` once it is serving,
  ``STOPPING=1`` when shutdown begins, ``STATUS=`` one-line summaries, and
  ``WATCHDOG=1`` at half of ``$WATCHDOG_USEC``.
- **listen fds** (``sd_listen_fds``): under socket activation the service
  manager passes sockets as fds 3, 4, ... and says so with ``$LISTEN_FDS`` and
  ``$LISTEN_PID`` (which must be our pid).

Everything here is synchronous; the timers that send periodic notifications
live in the server (the asyncio edge).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, MutableMapping

log = logging.getLogger(__name__)

#: The first passed fd (``SD_LISTEN_FDS_START``).
LISTEN_FDS_START = 3
#: How often ``STATUS=`` is refreshed (more often when the watchdog needs pinging).
STATUS_INTERVAL_S = 5.0
#: A notification never stalls the event loop longer than this.
_SEND_TIMEOUT_S = 0.5
_LISTEN_VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


class ActivationError(Exception):
    """The sockets passed by socket activation are not what the daemon can use."""


# -- notify -------------------------------------------------------------------------------


def notify_address(value: str | None) -> str | bytes | None:
    """``$NOTIFY_SOCKET`` -> an address for ``sendto`` (``@name`` is abstract), or None."""
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + os.fsencode(value[1:])
    if value.startswith("/"):
        return value
    return None  # vsock: and other transports are not supported


def notify(state: str, *, address: str | None = None, timeout: float = _SEND_TIMEOUT_S) -> bool:
    """Send ``state`` (``"READY=1"``, ``"STATUS=..."``, newline-separated) to systemd.

    ``address`` defaults to ``$NOTIFY_SOCKET``.  A full notify socket is waited
    on for at most ``timeout`` seconds (0: not at all).  Returns False when
    there is no notify socket or the send failed (never raises).
    """
    target = notify_address(os.environ.get("NOTIFY_SOCKET") if address is None else address)
    if target is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.settimeout(timeout)
            sock.sendto(state.encode("utf-8", "replace"), target)
    except OSError as exc:
        log.debug("systemd notify %r failed: %s", state, exc)
        return False
    return True


def watchdog_interval_s(environ: Mapping[str, str], pid: int) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings (half of ``$WATCHDOG_USEC``), or None if off.

    As ``sd_watchdog_enabled``: ``$WATCHDOG_PID``, when set, must be ``pid``.
    """
    watchdog_pid = environ.get("WATCHDOG_PID")
    if watchdog_pid is not None and watchdog_pid.strip() != str(pid):
        return None
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    return usec / 2 / 1_000_000


def status_line(
    activity: str, buffered: int, connections: int, received: int, acked: int, discarded: int
) -> str:
    """The one-line summary ``systemctl status`` shows, e.g.
    ``receiving on /run/pulsar-bruce/bruce.sock; 0 buffered; 1 broker connection; ...``."""
    plural = "" if connections == 1 else "s"
    return (
        f"{activity}; {buffered} buffered; {connections} broker connection{plural};"
        f" {received} received, {acked} acked, {discarded} discarded"
    )


class Notifier:
    """What the server tells systemd; every method is a no-op without ``$NOTIFY_SOCKET``."""

    def __init__(self, address: str | None, watchdog_s: float | None):
        self.address = address if notify_address(address) is not None else None
        self.watchdog_s = watchdog_s if self.address is not None else None

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str] | None = None, pid: int | None = None
    ) -> Notifier:
        env = os.environ if environ is None else environ
        return cls(
            env.get("NOTIFY_SOCKET"), watchdog_interval_s(env, os.getpid() if pid is None else pid)
        )

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def tick_s(self) -> float:
        """How often the server should call :meth:`tick`."""
        if self.watchdog_s is None:
            return STATUS_INTERVAL_S
        return min(STATUS_INTERVAL_S, self.watchdog_s)

    def send(self, *lines: str, timeout: float = _SEND_TIMEOUT_S) -> bool:
        if self.address is None:
            return False
        return notify("\n".join(lines), address=self.address, timeout=timeout)

    def ready(self, status: str) -> bool:
        return self.send("READY=1", f"STATUS={status}")

    def stopping(self, status: str) -> bool:
        return self.send("STOPPING=1", f"STATUS={status}")

    def tick(self, status: str) -> bool:
        """A status refresh, with the watchdog ping when the watchdog is on.

        Never waits: if the manager is not reading, this one is dropped and the
        next tick (well within the watchdog interval) tries again.
        """
        if self.watchdog_s is None:
            return self.send(f"STATUS={status}", timeout=0)
        return self.send(f"STATUS={status}", "WATCHDOG=1", timeout=0)


# -- socket activation ------------------------------------------------------------------------


def listen_fds(
    environ: MutableMapping[str, str] | None = None,
    *,
    pid: int | None = None,
    start: int = LISTEN_FDS_START,
    unset: bool = True,
) -> list[socket.socket]:
    """The sockets passed by socket activation (``sd_listen_fds``), maybe none.

    ``$LISTEN_PID`` must equal our pid (else the variables were meant for a
    parent and nothing was passed to us).  The variables are removed afterwards
    (``unset``) so that child processes do not inherit them.  Each passed fd
    must be an AF_UNIX datagram socket or a listening AF_UNIX stream socket,
    else :class:`ActivationError`.
    """
    env = os.environ if environ is None else environ
    try:
        count = _passed_fd_count(env, os.getpid() if pid is None else pid)
    finally:
        if unset:
            for name in _LISTEN_VARIABLES:
                env.pop(name, None)
    sockets: list[socket.socket] = []
    try:
        for fd in range(start, start + count):
            sockets.append(_datagram_socket(fd))
    except BaseException:
        for sock in sockets:
            sock.detach()  # leave the fds as we found them
        raise
    return sockets


def activated_sockets(
    environ: MutableMapping[str, str] | None = None,
    *,
    pid: int | None = None,
    start: int = LISTEN_FDS_START,
) -> tuple[socket.socket | None, socket.socket | None]:
    """The datagram socket and the stream (confirmed delivery) socket systemd passed us;
    None for each one it did not pass (both None: not socket-activated)."""
    sockets = listen_fds(environ, pid=pid, start=start)
    datagram = [s for s in sockets if s.type == socket.SOCK_DGRAM]
    stream = [s for s in sockets if s.type == socket.SOCK_STREAM]
    if len(datagram) > 1 or len(stream) > 1:
        for sock in sockets:
            sock.close()
        raise ActivationError(
            f"socket activation passed {len(sockets)} sockets; expected one ListenDatagram="
            " and at most one ListenStream= in the .socket unit"
        )
    if stream and not datagram:
        stream[0].close()
        raise ActivationError(
            "socket activation passed only a stream socket; the datagram socket"
            " (ListenDatagram=) is required"
        )
    return (datagram[0] if datagram else None), (stream[0] if stream else None)


def activated_socket(
    environ: MutableMapping[str, str] | None = None,
    *,
    pid: int | None = None,
    start: int = LISTEN_FDS_START,
) -> socket.socket | None:
    """The datagram socket systemd passed us, or None when not socket-activated."""
    datagram, stream = activated_sockets(environ, pid=pid, start=start)
    if stream is not None:
        stream.close()
    return datagram


def socket_name(sock: socket.socket) -> str:
    """A readable name for a bound UNIX socket (``@name`` for the abstract namespace)."""
    name = sock.getsockname()
    if isinstance(name, bytes):
        return "@" + os.fsdecode(name[1:]) if name.startswith(b"\0") else os.fsdecode(name)
    return str(name) if name else "(unnamed socket)"


def _passed_fd_count(environ: Mapping[str, str], pid: int) -> int:
    listen_pid = environ.get("LISTEN_PID")
    if listen_pid is None:
        return 0
    try:
        if int(listen_pid) != pid:
            return 0  # meant for another process
    except ValueError:
        raise ActivationError(f"socket activation: invalid LISTEN_PID={listen_pid!r}") from None
    text = environ.get("LISTEN_FDS", "")
    try:
        count = int(text)
    except ValueError:
        raise ActivationError(f"socket activation: invalid LISTEN_FDS={text!r}") from None
    if count < 0:
        raise ActivationError(f"socket activation: invalid LISTEN_FDS={text!r}")
    return count


def _datagram_socket(fd: int) -> socket.socket:
    try:
        os.set_inheritable(fd, False)  # as sd_listen_fds: FD_CLOEXEC on every passed fd
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise ActivationError(
            f"socket activation: fd {fd} is not an open socket ({exc.strerror or exc})"
        ) from None
    family, kind = sock.family, sock.type
    listening = kind == socket.SOCK_STREAM and bool(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    )
    if family != socket.AF_UNIX or not (kind == socket.SOCK_DGRAM or listening):
        sock.detach()
        what = f"{_name(family)}/{_name(kind)}" + ("" if listening else " (not listening)")
        raise ActivationError(
            f"socket activation: fd {fd} is an {what} socket; expected"
            " AF_UNIX/SOCK_DGRAM (ListenDatagram=/path in the .socket unit)"
            " or a listening AF_UNIX/SOCK_STREAM (ListenStream=/path)"
        )
    return sock


def _name(value: object) -> str:
    return getattr(value, "name", str(value))

"""examples/run_local.py's ports: whether one is taken, and by what (Linux /proc), and free ones."""

from __future__ import annotations

import errno
import os
import pwd
import random
import socket
import sys
from pathlib import Path

HOST = "127.0.0.1"


def port_taken(port: int) -> bool:
    """True if 127.0.0.1:port cannot be bound (something listens there, or on all addresses)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is not "taken"
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            return exc.errno in (errno.EADDRINUSE, errno.EACCES)
    return False


def accepts(port: int) -> bool:
    """True once something accepts connections on 127.0.0.1:port (a probe that binds
    nothing, so it cannot get in the way of the child binding it)."""
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _listening_sockets(port: int) -> dict[str, int]:
    """``{"socket:[inode]": uid}`` of the TCP sockets listening on ``port`` (Linux /proc)."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state, uid, inode = fields[1], fields[3], fields[7], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found[f"socket:[{inode}]"] = int(uid)
    return found


def port_holder(port: int) -> tuple[int | None, str]:
    """(pid, description) of what listens on ``port``: ``pid 42 (pulsar-lite --addr ...)``."""
    sockets = _listening_sockets(port)
    if not sockets:
        return None, "something"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in sockets for fd in (proc / "fd").iterdir()):
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                if len(command) > 100:
                    command = command[:97] + "..."
                return int(proc.name), f"pid {proc.name} ({command})"
        except OSError:  # gone, or not ours to look at
            continue
    uid = next(iter(sockets.values()))
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return None, f"a process of user {user}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def free_ports_in_a_row(count: int) -> int:
    """The first of ``count`` consecutive free ports, below the kernel's ephemeral range (a
    free port in it can be taken by any outgoing connection before a broker binds it)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    candidates = list(range(10000, max(low - count, 10001), count))
    random.shuffle(candidates)
    for first in candidates:
        if not any(port_taken(first + i) for i in range(count)):
            return first
    sys.exit(f"run_local: no {count} consecutive free ports below {low}")


def next_free(port: int, count: int = 1) -> int:
    """The first port above ``port`` with ``count`` free ports in a row from it."""
    candidate = port + count
    while any(port_taken(candidate + i) for i in range(count)):
        candidate += count
    return candidate


def refuse_taken_ports(ports: dict[int, str], others: dict[str, tuple[int, int]]) -> None:
    """Exit with one line if any port is taken, naming what holds each, and the make
    variables that would start a copy on free ones (``others``: variable -> (port, how
    many in a row), for the ports ``make run`` takes a variable for)."""
    taken = [
        f"port {port} ({role}) is taken by {port_holder(port)[1]}"
        for port, role in ports.items()
        if port_taken(port)
    ]
    if not taken:
        return
    choose = [
        f"{name}={next_free(port, count)}"
        for name, (port, count) in others.items()
        if any(port_taken(port + i) for i in range(count))
    ]
    remedy = f"; other ports: make run {' '.join(choose)}" if choose else ""
    sys.exit(f"run_local: not starting: {'; '.join(taken)}{remedy}")

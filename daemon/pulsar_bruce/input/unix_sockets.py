"""Creating the daemon's socket files: the datagram socket and the stream socket alike.

Both get the same treatment, so a sender allowed on one is allowed on the
other: the directory is created if missing and refused if anyone could
replace the socket in it (owned by a user other than root or ours, or writable by others
without the sticky bit); a stale socket file (nobody listening) is removed,
a live one or a path that is not a socket is refused; the file is bound with
no permissions, given ``--socket-group``, then ``--socket-mode``, so it never
exists with looser permissions or for the wrong group.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import socket
import stat
from pathlib import Path

from pulsar_bruce.model.group_lookup import group_id

#: Receive buffer we ask the kernel for on the datagram socket; it caps it at
#: net.core.rmem_max.
_RCVBUF_BYTES = 8 * 1024 * 1024
#: What another process does on a live socket, for the error message.
_LISTENING = {socket.SOCK_DGRAM: "receiving", socket.SOCK_STREAM: "accepting"}


class SocketInUseError(Exception):
    """Another process is receiving on the socket path, or the path is not a socket."""


class InsecureSocketDirectoryError(PermissionError):
    """Another user could replace the socket: the directory is theirs or they can write it."""


def check_socket_directory(path: str) -> None:
    """Refuse a directory where a user other than root or ours could replace our socket file.

    Its owner can always rename or delete entries, so it must be root or the daemon's
    user; a group- or world-writable one needs the sticky bit (only a file's owner may
    then remove it), as in /tmp.
    """
    directory = Path(path).parent
    try:
        info = os.stat(directory)
    except OSError:
        return  # binding will say what is wrong with it
    ours = os.geteuid()
    if info.st_uid not in (0, ours):
        raise InsecureSocketDirectoryError(
            f"refusing to create the socket in {directory}: the directory belongs to "
            f"{_user_name(info.st_uid)}, who could replace the socket; use a directory owned "
            f"by {'root' if ours == 0 else 'root or ' + _user_name(ours)} (e.g. /run/pulsar-bruce, "
            "or chown it)"
        )
    mode = info.st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
        who = "world" if mode & stat.S_IWOTH else "group"
        raise InsecureSocketDirectoryError(
            f"refusing to create the socket in {directory}: the directory is {who}-writable "
            f"without the sticky bit, so {'anyone' if who == 'world' else 'its group'} could "
            f"replace the socket; use a directory only the daemon's user can write to "
            f"(e.g. /run/pulsar-bruce, or chmod go-w it)"
        )


def _user_name(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name!r} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def open_unix_socket(
    path: str, kind: socket.SocketKind, mode: int, group: str | None = None
) -> socket.socket:
    """A non-blocking ``AF_UNIX`` socket of ``kind`` bound at ``path`` (``mode``, ``group``).

    A stream socket is bound, not yet listening: ``loop.create_unix_server(sock=...)``
    listens.  Raises :class:`SocketInUseError`, :class:`InsecureSocketDirectoryError`
    or ``PermissionError`` with one line saying why; nothing is left behind then.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    check_socket_directory(path)
    _remove_stale_socket(target, kind)
    sock = socket.socket(socket.AF_UNIX, kind)
    bound = False
    try:
        old_umask = os.umask(0o777)
        try:
            sock.bind(path)
            bound = True
        finally:
            os.umask(old_umask)
        if group is not None:
            try:
                os.chown(path, -1, group_id(group))
            except (KeyError, OSError) as exc:
                detail = "unknown group" if isinstance(exc, KeyError) else exc.strerror
                raise PermissionError(f"cannot give {path} to group {group!r}: {detail}") from None
        os.chmod(path, mode)
        sock.setblocking(False)
        if kind == socket.SOCK_DGRAM:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF_BYTES)
    except BaseException:
        sock.close()
        if bound:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    return sock


def _remove_stale_socket(target: Path, kind: socket.SocketKind) -> None:
    """Remove a socket file nobody listens on; refuse a live one or a path that is no socket."""
    try:
        info = target.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise SocketInUseError(f"{target} exists and is not a socket; refusing to replace it")
    # A socket of the other kind answers EPROTOTYPE: ask it as what it is.
    other = socket.SOCK_STREAM if kind == socket.SOCK_DGRAM else socket.SOCK_DGRAM
    for probe_kind in (kind, other):
        probe = socket.socket(socket.AF_UNIX, probe_kind)
        probe.setblocking(False)  # a listener with a full backlog answers EAGAIN, not never
        try:
            probe.connect(str(target))
        except OSError as exc:
            if exc.errno == errno.EPROTOTYPE:
                continue
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                target.unlink(missing_ok=True)
                return
            if exc.errno != errno.EAGAIN:
                raise
        finally:
            probe.close()
        raise SocketInUseError(f"another process is {_LISTENING[probe_kind]} on {target}")
    raise SocketInUseError(f"{target} is a socket of another kind; refusing to replace it")

"""Paths the start would refuse, refused when the configuration is loaded.

So ``--check-config`` catches them too: a socket path longer than the kernel's
``sun_path``, a spool directory or socket directory that names a file, a discard
log that names a directory or sits in a directory that does not exist.
Permissions are not checked: ``--check-config`` may run as another user.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pulsar_bruce.config.model import Config

#: ``sizeof(struct sockaddr_un.sun_path)`` on Linux: the longest path ``bind()`` takes.
SUN_PATH_BYTES = 108


def check_paths(config: Config) -> None:
    """Raise ``ValueError`` with one line naming the option when a path cannot work."""
    stream = config.stream_socket_path
    sockets = [("--socket", config.socket, "")]
    if stream is not None:
        auto = " (auto: next to --socket; shorten --socket or set --stream-socket)"
        sockets.append(("--stream-socket", stream, auto if config.stream_socket == "auto" else ""))
    for flag, path, hint in sockets:
        size = len(os.fsencode(path))
        if size > SUN_PATH_BYTES:
            raise ValueError(
                f"{flag}: {path!r} is {size} bytes long; a UNIX socket path has at most "
                f"{SUN_PATH_BYTES}{hint}"
            )
        _directory_or_creatable(flag, Path(path), Path(path).parent)
    if config.spool_dir:
        _directory_or_creatable("--spool-dir", Path(config.spool_dir), Path(config.spool_dir))
    if config.discard_log:
        log = Path(config.discard_log)
        if log.is_dir():
            raise ValueError(f"--discard-log: {str(log)!r} is a directory; expected a file")
        if not log.parent.is_dir():
            raise ValueError(f"--discard-log: directory {str(log.parent)!r} does not exist")


def _directory_or_creatable(flag: str, given: Path, directory: Path) -> None:
    """``directory`` (of the option's ``given`` path) is one, or can be made: the nearest
    part of it that exists is one."""
    for part in (directory, *directory.parents):
        if part.exists():
            if not part.is_dir():
                which = "" if part == given else f"{str(given)!r}: "
                raise ValueError(f"{flag}: {which}{str(part)!r} is not a directory")
            return

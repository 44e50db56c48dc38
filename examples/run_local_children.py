"""examples/run_local.py's children: started with the stop signals blocked, tied to this
process's life (Linux), waited for until ready, their exit statuses said in words."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _child_setup(parent: int) -> Callable[[], None]:
    """In the child before exec: take the stop signals again, and (Linux) get SIGTERM
    when this process dies, however it dies."""

    libc = ctypes.CDLL(None) if sys.platform == "linux" else None

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        if libc is not None:
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # it died before prctl
                os.kill(os.getpid(), signal.SIGTERM)

    return setup


def start(command: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start a child with the stop signals blocked here, so a signal cannot arrive between
    the fork and our knowing the child's pid (it is delivered right after)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        return subprocess.Popen(command, preexec_fn=_child_setup(os.getpid()), **kwargs)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def exit_status(returncode: int) -> str:
    """``-9`` -> ``killed by SIGKILL``, ``1`` -> ``exit code 1``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def wait_until(
    ready: Callable[[], bool],
    child: subprocess.Popen[bytes],
    what: str,
    log: str,
    timeout: float = 30,
) -> None:
    """Return once ``ready()``; exit (one line, its log named) if ``child`` exits first or
    it takes longer than ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if child.poll() is not None:
            sys.exit(f"run_local: {what} exited ({child.returncode}); see {log}")
        if time.monotonic() > deadline:
            sys.exit(f"run_local: {what} did not start within {timeout:.0f} s; see {log}")
        time.sleep(0.1)

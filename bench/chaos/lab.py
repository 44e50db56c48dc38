"""Brokers and daemons for the long-form runners, outside pytest.

Uses the test suite's own ``Broker`` and ``Daemon`` (``tests/support/processes.py``).
With ``snapshot`` the checkout's ``daemon/`` and ``client_lib/`` are copied first and
every daemon of the run uses that copy, so a working tree edited during a long run
cannot mix two versions of the code.  (This process's own imports, such as the fuzz
classifier's parser, come from the installed package.)
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from tests.support.processes import ROOT, SOURCE_ROOTS, Broker, Daemon


class Lab:
    def __init__(self, workdir: str | None = None, snapshot: bool = True, keep: bool = False):
        self.keep = keep or workdir is not None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="pulsar-bruce-chaos-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.source_roots = list(SOURCE_ROOTS)
        self.code = _describe_checkout()
        if snapshot:
            copy = self.workdir / "code"
            for name in ("daemon", "client_lib"):
                shutil.copytree(
                    ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__")
                )
            self.source_roots = [copy / "daemon", copy / "client_lib"]
            self.code += f", snapshot in {copy}"
        self._brokers: list[Broker] = []
        self._daemons: list[Daemon] = []
        self._count = 0

    def broker(self, partitions: int = 4) -> Broker:
        self._count += 1
        broker = Broker(self.workdir / f"broker{self._count}", partitions)
        broker.start()
        self._brokers.append(broker)
        return broker

    def start_daemon(self, service_url: str, *args: str) -> Daemon:
        self._count += 1
        workdir = self.workdir / f"daemon{self._count}"
        workdir.mkdir()
        daemon = Daemon(workdir, service_url, list(args), self.source_roots)
        self._daemons.append(daemon)
        return daemon

    def spool_dir(self) -> str:
        """A fresh directory for a daemon's disk spool."""
        self._count += 1
        return str(self.workdir / f"spool{self._count}")

    def cleanup(self) -> None:
        for daemon in self._daemons:
            daemon.kill()
        for broker in self._brokers:
            broker.kill()
        self._daemons.clear()
        self._brokers.clear()

    def __enter__(self) -> Lab:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _describe_checkout() -> str:
    def git(*args: str) -> str:
        command = ["git", "--no-optional-locks", "-C", str(ROOT), *args]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        return result.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "daemon", "client_lib")
    return f"code: {head}{' + uncommitted changes' if dirty else ''}"

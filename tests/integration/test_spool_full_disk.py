"""The disk spool on a real full filesystem (a small tmpfs), with a real broker.

Mounting needs root (CAP_SYS_ADMIN); elsewhere the test skips.  The unit tests
(tests/unit/daemon/spool) inject the same ENOSPC into the store's writes.
"""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_spool_daemon import send_numbered, values_of
from tests.support.processes import Broker, wait_for

pytestmark = pytest.mark.broker


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted at teardown."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        with contextlib.suppress(OSError):
            subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_after_a_full_disk_is_freed_new_messages_flow_again(
    small_disk: Path, own_broker: Broker, start_daemon
) -> None:
    """Issue 29: the journal fills the disk with what memory holds; once space is freed it
    fills it again with what it could not write, so the spool's next write fails too.
    What the disk refuses waits in memory (which has room) instead of being discarded."""
    topic = f"full-{uuid.uuid4().hex[:8]}"
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (1948 * 1024))  # 100 KiB left
    daemon = start_daemon(
        own_broker.url, "--spool-dir", str(small_disk / "spool"), "--spool-after-s", "1"
    )
    daemon.warm_up(topic, 4)
    own_broker.kill()
    send_numbered(daemon, topic, range(3000), size=1000)  # 3 MB in memory, journalled
    wait_for(lambda: daemon.counters().received == 3001, 60, "all datagrams received")
    wait_for(lambda: "no broker reachable" in daemon.log(), 30, "the spill to start")
    filler.unlink()
    send_numbered(daemon, topic, range(3000, 3500), size=1000)  # to the spool's disk
    wait_for(lambda: daemon.counters().received == 3501, 60, "the next 500 received")
    assert "messages kept in memory" in daemon.log()  # the disk was full again
    own_broker.start()
    counters = daemon.wait_settled(3501, timeout=90)
    assert counters.discarded["buffer_full"] == 0
    assert counters.acked == 3501 and counters.identity_holds()
    stored = values_of(own_broker, topic, counters.acked + counters.possible_duplicates)
    assert stored >= set(range(3500))

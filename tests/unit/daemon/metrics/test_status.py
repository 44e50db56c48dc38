"""``pulsar-bruce status``'s text: which daemon it read, and the rejected samples."""

from __future__ import annotations

from typing import Any

from pulsar_bruce.metrics.status import REJECTS_SHOWN, render_status


def document(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "version": "0.1.0",
        "uptime_s": 4.0,
        "pid": 4242,
        "config_file": "/etc/pulsar-bruce/bruce.toml",
        "socket": "/run/pulsar-bruce/bruce.sock",
        "service_url": "pulsar://127.0.0.1:6650",
        "connections": [],
        "received": 3,
        "acked": 1,
        "buffered_messages": 0,
        "buffered_bytes": 0,
        "possible_duplicates": 0,
        "discarded": {"malformed": 2},
        "topics": [],
        "topic_count": 0,
        "recent_rejects": [],
    }
    doc.update(changes)
    return doc


def test_the_first_line_says_which_daemon_was_read() -> None:
    text = render_status(document(), None, "http://127.0.0.1:9090/status")
    assert text.splitlines()[0] == (
        "pulsar-bruce 0.1.0 at http://127.0.0.1:9090/status "
        "(pid 4242, config /etc/pulsar-bruce/bruce.toml), up 0m 4s"
    )
    bare = render_status(document(config_file=None), None, "http://h:1/status")
    assert "(pid 4242, config none (options and environment only))" in bare.splitlines()[0]


def test_the_newest_rejected_samples_are_shown() -> None:
    rejects = [{"reason": "malformed", "datagram_prefix_b64": f"AAA{i}"} for i in range(10)]
    lines = render_status(document(recent_rejects=rejects)).splitlines()
    start = lines.index(f"  rejected    the last {REJECTS_SHOWN}, first bytes in base64:")
    assert lines[start + 1 : start + 1 + REJECTS_SHOWN] == [
        f"    malformed  AAA{i}" for i in range(10 - REJECTS_SHOWN, 10)
    ]

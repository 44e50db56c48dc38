"""The ``/status`` JSON document and its one-screen text rendering.

Built on demand from the same plain counters the metrics use (never on the hot
path).  Secrets never appear here: only names, counts and addresses.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterable
from typing import Any

from pulsar_bruce import __version__
from pulsar_bruce.model.ledger import Ledger
from pulsar_bruce.native import INTAKE
from pulsar_bruce.route.topic import Topic

#: Topics listed in ``/status``, busiest (most buffered) first.
STATUS_TOPIC_LIMIT = 50
#: Rejected datagrams' samples ``pulsar-bruce status`` shows, newest last.
REJECTS_SHOWN = 5


def status_document(
    *,
    started_at: float,
    socket: str,
    service_url: str,
    config_file: str | None = None,
    stats: Ledger,
    topics: Iterable[Topic],
    connections: Iterable[str],
    recent_rejects: Iterable[tuple[str, bytes]],
) -> dict[str, Any]:
    """Everything an operator looks at first, as a JSON-ready dict."""
    topic_rows: list[dict[str, Any]] = []
    for topic in topics:
        buffered = topic.buffered_messages
        topic_rows.append(
            {
                "name": topic.name,
                "partitions": len(topic.producers) if topic.partitioned else 0,
                "ready_producers": sum(1 for p in topic.producers if p.ready),
                "buffered": buffered,
                "acked": topic.stats.acked,
                "discarded": dict(topic.stats.discarded),
            }
        )
    topic_rows.sort(key=lambda row: (-row["buffered"], row["name"]))
    return {
        "version": __version__,
        "intake": INTAKE,
        "uptime_s": round(time.time() - started_at, 3),
        "pid": os.getpid(),
        "config_file": config_file,
        "socket": socket,
        "service_url": service_url,
        "received": stats.received,
        "acked": stats.acked,
        "discarded": {reason: n for reason, n in stats.discarded.items() if n},
        "buffered_messages": stats.buffered_messages,
        "buffered_bytes": stats.buffered_bytes,
        "possible_duplicates": stats.possible_duplicates,
        "already_stored": stats.already_stored,
        "batches_sent": stats.batches_sent,
        "connections": sorted(connections),
        "topics": topic_rows[:STATUS_TOPIC_LIMIT],
        "topic_count": len(topic_rows),
        "recent_rejects": [
            {"reason": reason, "datagram_prefix_b64": base64.b64encode(prefix).decode()}
            for reason, prefix in recent_rejects
        ],
    }


def render_status(
    doc: dict[str, Any], previous: dict[str, Any] | None = None, url: str | None = None
) -> str:
    """A readable summary of a status document (``pulsar-bruce status``); the first line
    says which daemon it is (``url``: where it was read, its pid and config file)."""
    uptime = float(doc["uptime_s"])
    where = [f"pid {doc['pid']}"] if "pid" in doc else []
    if "config_file" in doc:
        where.append(f"config {doc['config_file'] or 'none (options and environment only)'}")
    read_at = f" at {url}" if url else ""
    detail = f" ({', '.join(where)})" if where else ""
    lines = [
        f"pulsar-bruce {doc['version']}{read_at}{detail}, up {_duration(uptime)}",
        f"  socket      {doc['socket']}",
        f"  brokers     {doc['service_url']} ({len(doc['connections'])} connections)",
        f"  received    {doc['received']:,}",
        f"  acked       {doc['acked']:,}",
        f"  buffered    {doc['buffered_messages']:,} messages, {doc['buffered_bytes']:,} bytes",
        f"  duplicates  {doc['possible_duplicates']:,} possible",
    ]
    if previous is not None:
        elapsed = uptime - float(previous["uptime_s"])
        if elapsed > 0:
            rate = (doc["acked"] - previous["acked"]) / elapsed
            lines.append(f"  throughput  {rate:,.0f} acked/s over the last {elapsed:.1f} s")
    else:
        lines.append(f"  throughput  {doc['acked'] / uptime if uptime else 0:,.0f} acked/s average")
    discarded = sorted(doc["discarded"].items(), key=lambda item: -item[1])
    if discarded:
        lines.append("  discarded   " + ", ".join(f"{r} {n:,}" for r, n in discarded[:5]))
    else:
        lines.append("  discarded   none")
    rejects = doc.get("recent_rejects") or []
    if rejects:
        shown = rejects[-REJECTS_SHOWN:]
        lines.append(f"  rejected    the last {len(shown)}, first bytes in base64:")
        lines.extend(f"    {row['reason']}  {row['datagram_prefix_b64']}" for row in shown)
    if doc["topics"]:
        lines.append(f"  topics ({doc['topic_count']}):")
        for row in doc["topics"][:10]:
            lines.append(
                f"    {row['name']}  buffered {row['buffered']:,}  acked {row['acked']:,}"
                f"  producers ready {row['ready_producers']}/{max(row['partitions'], 1)}"
            )
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h {minutes}m"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s"

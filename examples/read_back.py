"""Print what a topic holds, from its beginning: one line per message and nothing else.

    python examples/read_back.py --topic demo          # next to `make run`
    key=k1 value=hello
    key=o-17 properties={"region": "eu", "source": "web"} value={"total":3}
    value=xxxxxxxx... (2000000 bytes)

Properties are shown (so ``to_pulsar --property`` can be checked); a value longer
than --max-bytes (200) is cut there and its size said, unless --full. Uses the
official client (pulsar-client), its log silenced (errors come back as exceptions,
printed as one line). Waits up to --timeout seconds for the first message, prints
it and each next one until none comes for a second, and exits. Exit status 1 (one
line on stderr) if there is none or no broker answers; piped into ``head``, it
stops quietly when ``head`` has had enough.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import urllib.parse
from typing import Any

import pulsar

IDLE_MS = 1000


def show_value(data: bytes, max_bytes: int | None) -> str:
    """UTF-8 as text, else as Python bytes; past ``max_bytes``, the start and the size
    (a 2 MB value would otherwise fill the terminal)."""
    cut = max_bytes is not None and len(data) > max_bytes
    try:
        data.decode()
        text = True
    except UnicodeDecodeError:
        text = False
    shown = data[:max_bytes] if cut else data
    # A cut may split a character: drop its start ("ignore"), the rest is valid UTF-8.
    value = shown.decode(errors="ignore") if text else repr(shown)
    return f"{value}... ({len(data)} bytes)" if cut else value


def describe(message: Any, max_bytes: int | None = None) -> str:
    """``key=k1 properties={...} value=hello``: the key and properties only if present."""
    parts = []
    if key := message.partition_key():
        parts.append(f"key={key}")
    if properties := message.properties():
        parts.append(f"properties={json.dumps(dict(sorted(properties.items())))}")
    parts.append(f"value={show_value(message.data(), max_bytes)}")
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="read_back.py", description=__doc__.split("\n")[0])
    parser.add_argument("--topic", required=True, help="t, tenant/ns/t or a full topic name")
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for the first message [5]"
    )
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=200,
        help="show the first N bytes of a longer value, and its size [200]",
    )
    parser.add_argument("--full", action="store_true", help="show every value whole")
    args = parser.parse_args(argv)
    max_bytes = None if args.full else max(args.max_bytes, 0)
    try:
        return read(args, max_bytes)
    except BrokenPipeError:  # `read_back.py | head`: the reader has had enough
        # Later writes (the flush at exit) must not fail again: send them nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def any_broker_answers(service_url: str, timeout: float) -> bool:
    """Whether a host of the service URL (``pulsar://h1:p1,h2:p2`` names several) accepts."""
    scheme, _, hosts = service_url.partition("://")
    default_port = 6651 if scheme == "pulsar+ssl" else 6650
    for host in hosts.rstrip("/").split(","):
        url = urllib.parse.urlsplit(f"{scheme}://{host}")
        try:
            socket.create_connection((url.hostname, url.port or default_port), timeout).close()
            return True
        except OSError:
            continue
    return False


def read(args: argparse.Namespace, max_bytes: int | None) -> int:
    """Print the topic's messages; 1 (and one line on stderr) if there are none."""
    if not any_broker_answers(args.service_url, args.timeout):
        print(f"read_back: no broker at {args.service_url}", file=sys.stderr)
        return 1
    # The C++ client's log, silenced. (Not through a Python logger: with one, the client
    # aborts now and then as the interpreter exits.)
    quiet = pulsar.FileLogger(pulsar.LoggerLevel.Error, os.devnull)
    client = pulsar.Client(
        args.service_url, logger=quiet, operation_timeout_seconds=max(1, int(args.timeout))
    )
    try:
        reader = client.create_reader(args.topic, pulsar.MessageId.earliest)
        try:
            first = reader.read_next(int(args.timeout * 1000))
            print(describe(first, max_bytes), flush=True)
        except pulsar.Timeout:
            where = f"{args.topic} on {args.service_url}"
            print(f"read_back: no message in {where} within {args.timeout:g} s", file=sys.stderr)
            return 1
        while True:  # has_message_available() needs GetLastMessageId: pulsar-lite has none
            try:
                print(describe(reader.read_next(IDLE_MS), max_bytes), flush=True)
            except pulsar.Timeout:
                break
    except pulsar.PulsarException as exc:
        print(f"read_back: {args.topic} on {args.service_url}: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Print what a topic holds, from its beginning: one line per message and nothing else.

    python examples/read_back.py --topic demo          # next to `make run`
    key=k1 value=hello

Uses the official client (pulsar-client), its log silenced (errors come back as
exceptions, printed as one line). Waits up to --timeout seconds for the first
message, prints it and each next one until none comes for a second, and exits.
Exit status 1 (one line on stderr) if there is none or no broker answers.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import urllib.parse
from typing import Any

import pulsar

IDLE_MS = 1000


def describe(message: Any) -> str:
    """``key=k1 value=hello`` (values that are not UTF-8 as Python bytes)."""
    data = message.data()
    try:
        value = data.decode()
    except UnicodeDecodeError:
        value = repr(data)
    key = message.partition_key()
    return f"key={key} value={value}" if key else f"value={value}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="read_back.py", description=__doc__.split("\n")[0])
    parser.add_argument("--topic", required=True, help="t, tenant/ns/t or a full topic name")
    parser.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds to wait for the first message [5]"
    )
    args = parser.parse_args(argv)
    url = urllib.parse.urlsplit(args.service_url)
    try:
        socket.create_connection((url.hostname, url.port or 6650), timeout=args.timeout).close()
    except OSError as exc:
        print(f"read_back: no broker at {args.service_url} ({exc})", file=sys.stderr)
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
            print(describe(reader.read_next(int(args.timeout * 1000))), flush=True)
        except pulsar.Timeout:
            where = f"{args.topic} on {args.service_url}"
            print(f"read_back: no message in {where} within {args.timeout:g} s", file=sys.stderr)
            return 1
        while True:  # has_message_available() needs GetLastMessageId: pulsar-lite has none
            try:
                print(describe(reader.read_next(IDLE_MS)), flush=True)
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

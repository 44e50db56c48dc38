"""``to_pulsar`` command: send one message (or a paced burst) to the local daemon.

The only module allowed to import click; the rest of the package is stdlib-only.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

import click

from .client import Sender
from .encoding import encode_any_partition, encode_partition_key
from .errors import InvalidMessageError, ToPulsarError
from .paths import DEFAULT_SOCKET_PATH, SOCKET_ENV_VAR

PROG = "to_pulsar"

EPILOG = f"""\b
Examples:
  {PROG} --topic my-topic --value 'hello'
  {PROG} --topic public/default/events --key user42 --partition-key 7 --value '{{"a":1}}'
  {PROG} --topic persistent://acme/logs/raw --stdin < event.bin
  {PROG} --topic load-test --value x --count 1000 --interval-us 500
"""

INT32_MIN = -(2**31)
UINT32_MAX = 2**32 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def _encoder(
    topic: str, value: bytes, key: bytes, partition_key: int | None
) -> Callable[[int], bytes]:
    """Bind everything but the timestamp, which may change per send."""
    if partition_key is None:
        return lambda ts: encode_any_partition(topic, value, key, ts)
    return lambda ts: encode_partition_key(partition_key, topic, value, key, ts)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _send_paced(
    sender: Sender,
    encode: Callable[[int], bytes],
    timestamp_ms: int | None,
    count: int,
    interval_us: int,
) -> None:
    """Send ``count`` messages, message i due at start + i * interval (no drift)."""
    fixed = None if timestamp_ms is None else encode(timestamp_ms)
    interval = interval_us / 1_000_000
    start = time.perf_counter()
    for i in range(count):
        if interval and i:
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        sender.send_raw(fixed if fixed is not None else encode(_now_ms()))


@click.command(
    name=PROG,
    epilog=EPILOG,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--socket-path",
    "--socket_path",
    "socket_path",
    metavar="PATH",
    default=None,
    help=f"Daemon socket. [default: ${SOCKET_ENV_VAR}, else {DEFAULT_SOCKET_PATH}]",
)
@click.option("--topic", required=True, help="Topic: t, tenant/ns/t or a full persistent:// name.")
@click.option("--value", metavar="TEXT", default=None, help="Message value (UTF-8 encoded).")
@click.option(
    "--stdin", "use_stdin", is_flag=True, help="Read the value from stdin, byte for byte."
)
@click.option("--key", metavar="TEXT", default="", help="Message key (UTF-8). [default: none]")
@click.option(
    "--partition-key",
    "--partition_key",
    "partition_key",
    metavar="N",
    type=click.IntRange(INT32_MIN, UINT32_MAX),
    default=None,
    help="Route by this partition key (uint32, negative int32 accepted). [default: any partition]",
)
@click.option(
    "--timestamp",
    metavar="MS",
    type=int,
    default=None,
    help="Event time, ms since the epoch; 0 = none. [default: now]",
)
@click.option(
    "--count",
    metavar="N",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Send the message N times.",
)
@click.option(
    "--interval-us",
    "--interval_us",
    "interval_us",
    metavar="N",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Microseconds between sends when --count > 1.",
)
def command(
    socket_path: str | None,
    topic: str,
    value: str | None,
    use_stdin: bool,
    key: str,
    partition_key: int | None,
    timestamp: int | None,
    count: int,
    interval_us: int,
) -> None:
    """Send a message to Apache Pulsar through the local pulsar-bruce daemon."""
    if (value is not None) == use_stdin:
        raise click.UsageError("exactly one of --value or --stdin is required")
    if timestamp is not None and not INT64_MIN <= timestamp <= INT64_MAX:
        raise click.BadParameter(
            "must fit in an int64 (ms since the epoch)", param_hint="'--timestamp'"
        )
    # surrogateescape gives back the exact argv bytes, even if they are not UTF-8.
    payload = sys.stdin.buffer.read() if value is None else value.encode("utf-8", "surrogateescape")
    encode = _encoder(topic, payload, key.encode("utf-8", "surrogateescape"), partition_key)
    try:
        encode(0)  # validate before touching the socket: a bad message is a usage error
    except InvalidMessageError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        with Sender(socket_path) as sender:
            _send_paced(sender, encode, timestamp, count, interval_us)
    except ToPulsarError as exc:
        raise click.ClickException(str(exc)) from exc


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: one ``to_pulsar: error: ...`` line, never a traceback."""
    try:
        code = command.main(args=argv, prog_name=PROG, standalone_mode=False)
    except click.ClickException as exc:
        # UsageError exits 2 (click's convention), send failures 1.
        click.echo(f"{PROG}: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo(f"{PROG}: interrupted", err=True)
        sys.exit(130)
    except OSError as exc:  # e.g. reading stdin failed
        click.echo(f"{PROG}: error: {exc.strerror or exc}", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()

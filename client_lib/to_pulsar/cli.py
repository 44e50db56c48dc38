"""``to_pulsar`` command: send one message (or a paced burst) to the local daemon.

The only module allowed to import click; the rest of the package is stdlib-only.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click
from click.shell_completion import get_completion_class

from .cli_run import Progress, Run, Unconfirmed, confirm_all, encoder, summary
from .client import Sender
from .errors import InvalidMessageError, ToPulsarError
from .paths import (
    DEFAULT_SOCKET_PATH,
    SOCKET_ENV_VAR,
    STREAM_SOCKET_ENV_VAR,
    confirm_socket_path,
)

PROG = "to_pulsar"
# The variable click's completion protocol reads: _{PROG}_COMPLETE, upper-cased.
COMPLETE_VAR = "_TO_PULSAR_COMPLETE"
SHELLS = ("bash", "zsh", "fish")

EXIT_OK = 0
EXIT_FAILED = 1  # daemon unavailable, a send failed (timeout, too large), or --confirm failed
EXIT_USAGE = 2  # click's convention for usage errors
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it

EPILOG = f"""\b
Examples:
  {PROG} --topic my-topic --value 'hello'
  {PROG} --topic clicks --key user42 --value '{{"a":1}}'
  {PROG} --topic public/default/events --partition-key 7 --value '{{"a":1}}'
  {PROG} --topic persistent://acme/logs/raw --stdin < event.bin
  {PROG} --topic load-test --value x --count 1000 --interval-us 500
  {PROG} --topic load-test --value-size 1024 --count 1000000 --progress
  {PROG} --confirm --topic orders --key o-17 --value '{{"total":3}}'
  {PROG} --topic orders --property source=web --property region=eu --value x
  {PROG} --topic jobs --deliver-after-ms 60000 --value retry-me

\b
Load generation: --count N sends the message N times, message i due at
start + i * --interval-us (no drift; 0 = as fast as the daemon takes them).
The timestamp is taken per message unless --timestamp fixes it. With a
terminal on stderr a progress line (sent/total, msg/s, elapsed) and a
summary are shown; --progress / --no-progress force it on or off. Ctrl-C
stops the run, prints what was sent and exits 130.

\b
Confirmed delivery: with --confirm the messages go over the daemon's stream
socket (--stream-socket-path, else the one beside --socket-path: bruce.sock ->
bruce.stream.sock, as the daemon places it), and the command waits until the
broker has acked them all (up to --confirm-timeout-s). It prints nothing when they were;
if any was discarded it exits 1 with one line of counts by reason, e.g.
  {PROG}: error: 1 of 3 messages discarded (too_large 1)

\b
Shell completion (click's), e.g. in ~/.bashrc, ~/.zshrc or fish's completions:
  eval "$({COMPLETE_VAR}=bash_source {PROG})"
  eval "$({COMPLETE_VAR}=zsh_source {PROG})"
  {COMPLETE_VAR}=fish_source {PROG} > ~/.config/fish/completions/{PROG}.fish
or print the same script with: {PROG} --completion bash|zsh|fish

\b
Exit status:
  {EXIT_OK}    every message was sent
  {EXIT_FAILED}    the daemon is unavailable or a send failed (queue full past
       the timeout, message too large); with --confirm also: a message was
       discarded, or no confirmation came in time; one line on stderr
  {EXIT_USAGE}    usage error (bad or missing option, invalid message)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); the summary says how many were sent
"""

INT32_MIN = -(2**31)
UINT32_MAX = 2**32 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def _print_completion(ctx: click.Context, param: click.Parameter, shell: str | None) -> None:
    """``--completion SHELL``: print click's completion script for SHELL and exit 0."""
    if shell is None or ctx.resilient_parsing:
        return
    complete_class = get_completion_class(shell)
    if complete_class is None:  # unreachable: click.Choice only lets SHELLS through
        raise click.BadParameter(f"unsupported shell {shell!r}", ctx, param)
    click.echo(complete_class(ctx.command, {}, PROG, COMPLETE_VAR).source())
    ctx.exit(EXIT_OK)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``-V``/``--version``: the installed distribution's version (looked up only when asked,
    so sending pays nothing for it)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("pulsar-bruce")
    except PackageNotFoundError:  # imported from a checkout, not installed
        found = "(not installed)"
    click.echo(f"{PROG} {found}")
    ctx.exit(EXIT_OK)


def _parse_properties(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--property KEY=VALUE`` pairs (the value may contain ``=``); a later KEY wins."""
    properties = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="'--property'")
        properties[name] = value
    return properties


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
    # click.Path only for file-name completion: no checks (the connect reports problems).
    type=click.Path(readable=False),
    default=None,
    help=f"Daemon socket. [default: ${SOCKET_ENV_VAR}, else {DEFAULT_SOCKET_PATH}]",
)
@click.option(
    "--confirm",
    is_flag=True,
    help="Send over the stream socket and wait until the broker acked every message; "
    "exit 1 if any was discarded.",
)
@click.option(
    "--stream-socket-path",
    "--stream_socket_path",
    "stream_socket_path",
    metavar="PATH",
    type=click.Path(readable=False),
    default=None,
    help="Daemon stream socket, for --confirm. [default: beside --socket-path "
    f"(bruce.sock -> bruce.stream.sock), else ${STREAM_SOCKET_ENV_VAR}, else beside "
    f"${SOCKET_ENV_VAR} or {DEFAULT_SOCKET_PATH}]",
)
@click.option(
    "--confirm-timeout-s",
    "--confirm_timeout_s",
    "confirm_timeout_s",
    metavar="SECONDS",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="With --confirm: how long to wait for the confirmation (and for a full daemon).",
)
@click.option("--topic", required=True, help="Topic: t, tenant/ns/t or a full persistent:// name.")
@click.option("--value", metavar="TEXT", default=None, help="Message value (UTF-8 encoded).")
@click.option(
    "--stdin", "use_stdin", is_flag=True, help="Read the value from stdin, byte for byte."
)
@click.option(
    "--value-size",
    "--value_size",
    "value_size",
    metavar="BYTES",
    type=click.IntRange(min=0),
    default=None,
    help="Instead of --value/--stdin: a generated value of BYTES bytes ('x'), for load tests.",
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
    "--property",
    "properties",
    metavar="KEY=VALUE",
    multiple=True,
    callback=lambda _ctx, _param, pairs: _parse_properties(pairs),
    help="A message property (repeatable); sends pulsar-bruce's Message record.",
)
@click.option(
    "--deliver-after-ms",
    "--deliver_after_ms",
    "deliver_after_ms",
    metavar="MS",
    type=click.IntRange(min=0),
    default=None,
    help="Deliver to Shared/Key_Shared subscriptions MS ms after the daemon reads it "
    "(the daemon's clock); sent unbatched.",
)
@click.option(
    "--deliver-at",
    "--deliver_at",
    "deliver_at",
    metavar="MS",
    type=click.IntRange(min=1),
    default=None,
    help="Deliver to Shared/Key_Shared subscriptions at this time, ms since the epoch; "
    "sent unbatched.",
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
    help="Microseconds between sends when --count > 1 (0: as fast as possible).",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress line and summary on stderr. [default: when --count > 1 and stderr is a TTY]",
)
@click.option(
    "--completion",
    metavar="SHELL",
    type=click.Choice(SHELLS),
    default=None,
    is_eager=True,
    expose_value=False,
    callback=_print_completion,
    help="Print the shell completion script for SHELL (bash, zsh, fish) and exit.",
)
@click.option(
    "-V",
    "--version",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=_print_version,
    help="Print the version and exit.",
)
def command(
    socket_path: str | None,
    confirm: bool,
    stream_socket_path: str | None,
    confirm_timeout_s: float,
    topic: str,
    value: str | None,
    use_stdin: bool,
    value_size: int | None,
    key: str,
    partition_key: int | None,
    properties: dict[str, str],
    deliver_after_ms: int | None,
    deliver_at: int | None,
    timestamp: int | None,
    count: int,
    interval_us: int,
    progress: bool | None,
) -> None:
    """Send a message to Apache Pulsar through the local pulsar-bruce daemon.

    Each message is one Bruce datagram on the daemon's UNIX socket: AnyPartition
    (the daemon picks the partition), or PartitionKey with --partition-key N
    (partition N % partitions). The value is --value, stdin byte for byte with
    --stdin, or BYTES generated bytes with --value-size. With --count and
    --interval-us the command is a paced load generator. With --confirm they
    go over the daemon's stream socket and the command waits for the broker's acks.
    """
    if sum((value is not None, use_stdin, value_size is not None)) != 1:
        raise click.UsageError(
            "exactly one of --value or --stdin is required (or --value-size to generate one)"
        )
    if timestamp is not None and not INT64_MIN <= timestamp <= INT64_MAX:
        raise click.BadParameter(
            "must fit in an int64 (ms since the epoch)", param_hint="'--timestamp'"
        )
    if value_size is not None:
        payload = b"x" * value_size
    elif value is None:
        payload = sys.stdin.buffer.read()
    else:
        # surrogateescape gives back the exact argv bytes, even if they are not UTF-8.
        payload = value.encode("utf-8", "surrogateescape")
    raw_key = key.encode("utf-8", "surrogateescape")
    if deliver_at is not None and deliver_after_ms is not None:
        raise click.UsageError("give --deliver-at or --deliver-after-ms, not both")
    encode = encoder(
        topic, payload, raw_key, partition_key, properties, deliver_at, deliver_after_ms
    )
    try:
        encode(0)  # validate before touching the socket: a bad message is a usage error
    except InvalidMessageError as exc:
        raise click.UsageError(str(exc)) from exc
    if progress is None:
        progress = count > 1 and sys.stderr.isatty()
    bar = Progress(count, sys.stderr) if progress else None
    run: Run | None = None
    try:
        if confirm:
            from .stream import StreamSender  # only --confirm pays for importing it

            where = confirm_socket_path(stream_socket_path, socket_path)
            with StreamSender(where, timeout=confirm_timeout_s) as stream:
                run = Run(stream.send_raw, encode, timestamp, count, interval_us, bar)
                run.run()
                confirm_all(stream, count, confirm_timeout_s)
        else:
            with Sender(socket_path) as sender:
                run = Run(sender.send_raw, encode, timestamp, count, interval_us, bar)
                run.run()
    except Unconfirmed as exc:
        if bar is not None:
            bar.finish(count)
        raise click.ClickException(str(exc)) from exc
    except ToPulsarError as exc:
        message = str(exc)
        if run is not None:
            if bar is not None:
                bar.finish(run.sent)
            if count > 1:
                message += f" (after sending {run.sent} of {count} messages)"
        raise click.ClickException(message) from exc
    except KeyboardInterrupt:
        if run is None:  # still connecting: nothing sent
            raise
        elapsed = run.elapsed()
        if bar is not None:
            bar.finish(run.sent)
        click.echo(f"{PROG}: interrupted: {summary(run.sent, elapsed, count)}", err=True)
        click.get_current_context().exit(EXIT_INTERRUPTED)
    if bar is not None:
        elapsed = run.elapsed()
        bar.finish(count)
        click.echo(summary(count, elapsed), err=True)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: one ``to_pulsar: error: ...`` line, never a traceback.

    Exit status: 0 all sent, 1 daemon unavailable or send failed, 2 usage error,
    130 interrupted. Click's completion protocol (``_TO_PULSAR_COMPLETE``) is
    handled by ``command.main`` before any of this.
    """
    try:
        code = command.main(args=argv, prog_name=PROG, standalone_mode=False)
    except click.ClickException as exc:
        # UsageError exits 2 (click's convention), send failures 1.
        click.echo(f"{PROG}: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo(f"{PROG}: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except OSError as exc:  # e.g. reading stdin failed
        click.echo(f"{PROG}: error: {exc.strerror or exc}", err=True)
        sys.exit(EXIT_FAILED)
    sys.exit(code if isinstance(code, int) else EXIT_OK)


if __name__ == "__main__":
    main()

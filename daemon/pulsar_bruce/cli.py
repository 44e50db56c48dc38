"""``pulsar-bruce``: the daemon's command line (foreground, systemd style)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import click

from pulsar_bruce import __version__
from pulsar_bruce.config import OPTIONS, Config, ConfigError, load_config
from pulsar_bruce.config.effective import effective_config_toml
from pulsar_bruce.input.unix_sockets import SocketInUseError
from pulsar_bruce.metrics.status import render_status
from pulsar_bruce.native import INTAKE, INTAKE_CHOICE_ERROR
from pulsar_bruce.service import status_file
from pulsar_bruce.service.logs import setup_logging
from pulsar_bruce.service.systemd import ActivationError
from pulsar_bruce.spool.inspect import (
    NotASpoolDirectory,
    SpoolReport,
    daemon_using,
    empty_spool,
    inspect_spool,
)

log = logging.getLogger("pulsar_bruce")


def _add_config_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(OPTIONS):
        default = "none" if option.default is None else option.default
        if option.is_switch:
            default = str(default).lower()
        command = click.option(
            option.cli_flag or option.flag,
            option.name,
            default=None,
            metavar=None if option.is_switch else option.metavar,
            help=f"{option.help} [default: {default}; env {option.env}]",
        )(command)
    return command


class _UsageLine(click.UsageError):
    """A usage error shown as one line, as ``to_pulsar`` shows its own."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"pulsar-bruce: error: {self.format_message()}", err=True)


class _OneLineUsage(click.Group):
    """An unknown flag or a bad value gives one line with click's suggestion
    ("Did you mean ...?"), not click's three-line usage block."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _UsageLine(exc.format_message()) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:  # a subcommand's own options are parsed here
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _UsageLine(exc.format_message()) from None


@click.group(
    cls=_OneLineUsage,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--config",
    "config_path",
    metavar="PATH",
    default=None,
    help="TOML file; every option below has a key there (same name, underscores)",
)
@click.option(
    "--check-config",
    is_flag=True,
    help="validate the configuration, print the effective values and exit",
)
@_add_config_options
@click.version_option(
    __version__,
    "-V",
    "--version",
    prog_name="pulsar-bruce",
    message=f"%(prog)s %(version)s (intake: {INTAKE})",
)
@click.pass_context
def main(
    ctx: click.Context, /, config_path: str | None, check_config: bool, **command_line: Any
) -> None:
    """Receive Bruce datagrams on a UNIX socket and forward them to Apache Pulsar.

    Runs in the foreground. SIGTERM or SIGINT stops reading, delivers what is
    buffered (up to --shutdown-timeout-s) and exits 0.
    `pulsar-bruce status` summarises a running daemon; `pulsar-bruce spool`
    lists, checks or empties a stopped one's spool directory.
    """
    config_path = config_path or os.environ.get("PULSAR_BRUCE_CONFIG")
    try:
        if INTAKE_CHOICE_ERROR is not None:
            raise ConfigError(INTAKE_CHOICE_ERROR)
        config = load_config(command_line, os.environ, config_path)
    except ConfigError as exc:
        click.echo(f"pulsar-bruce: error: {exc}", err=True)
        sys.exit(2)
    if ctx.invoked_subcommand is not None:
        ctx.obj = config
        return
    if check_config:
        from pulsar_bruce.route.topic_settings import encryption_recipients
        from pulsar_bruce.service.connection_options import connection_security

        try:  # the TLS, token and encryption key files must be usable too
            connection_security(config)
            encryption_recipients(config)
        except ConfigError as exc:
            click.echo(f"pulsar-bruce: error: {exc}", err=True)
            sys.exit(2)
        click.echo(effective_config_toml(config), nl=False)
        return
    _serve(config, lambda: load_config(command_line, os.environ, config_path))


def _serve(config: Config, reload: Callable[[], Config]) -> None:
    setup_logging(config.log_level_number)
    from pulsar_bruce.server import Server

    async def run() -> None:
        await Server(config, reload).serve()

    try:
        import uvloop

        runner: Callable[..., Any] = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    try:
        runner(run())
    except ConfigError as exc:  # e.g. a TLS or token file that cannot be used
        click.echo(f"pulsar-bruce: error: {exc}", err=True)
        sys.exit(2)
    except (SocketInUseError, ActivationError, PermissionError, OSError) as exc:
        click.echo(f"pulsar-bruce: error: {exc}", err=True)
        sys.exit(1)


@main.command()
@click.option(
    "--url",
    metavar="URL",
    default=None,
    help="status page of the daemon [default: http://<--metrics-listen>/status]",
)
@click.option("--json", "as_json", is_flag=True, help="print the raw JSON document")
@click.option(
    "--interval",
    type=float,
    default=1.0,
    show_default=True,
    help="seconds between the two reads used for the current throughput (0: one read)",
)
@click.pass_obj
def status(config: Config, url: str | None, as_json: bool, interval: float) -> None:
    """Summarise a running daemon: uptime, throughput, buffered, connections, discards.

    It reads the daemon on the configuration's --socket (so `pulsar-bruce --config FILE
    status` reads the one FILE configures) where that daemon serves its status now, even
    if FILE has changed since, else the configuration's --metrics-listen; or --url.
    """
    if url is None:
        url = _daemon_status_url(config)
    first = _fetch_status(url)
    if as_json:
        click.echo(json.dumps(first, indent=1))
        return
    second = None
    if interval > 0:
        time.sleep(interval)
        second = _fetch_status(url)
    click.echo(render_status(second, first, url) if second else render_status(first, None, url))


def _daemon_status_url(config: Config) -> str:
    """The running daemon's status URL (the file it wrote beside its socket) if it answers,
    else the configured one; a difference between the two is said on stderr."""
    running = status_file.read(config.socket)
    configured = None
    if config.metrics_listen is not None:
        configured = status_file.status_url(*config.metrics_listen)
    if running is not None and running != configured and _answers(running):
        click.echo(
            f"pulsar-bruce: note: the daemon on {config.socket} serves its status at "
            f"{running}; the configuration says {configured or 'metrics off'}, which a "
            "restart applies",
            err=True,
        )
        return running
    if configured is None:
        click.echo("pulsar-bruce: error: metrics are off; pass --url", err=True)
        sys.exit(2)
    return configured


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except (OSError, ValueError):
        return False


def _fetch_status(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            document: dict[str, Any] = json.load(response)
            return document
    except (OSError, ValueError) as exc:
        click.echo(
            f"pulsar-bruce: error: cannot read {url}: {exc} (another daemon: "
            "pulsar-bruce --config FILE status, or status --url URL)",
            err=True,
        )
        sys.exit(1)


@main.group()
def spool() -> None:
    """List, check or empty the --spool-dir of a daemon that is not running."""


def _inspect(directory: str) -> SpoolReport:
    """The report on ``directory``; a running daemon's is a moment's snapshot, said so."""
    pid = daemon_using(Path(directory))
    if pid:
        click.echo(f"pulsar-bruce: warning: {directory} is in use by a running pulsar-bruce "
                   f"(pid {pid}): this is a snapshot of files it is changing; stop it for a "
                   "stable view", err=True)  # fmt: skip
    try:
        return inspect_spool(Path(directory))
    except NotASpoolDirectory as exc:
        click.echo(f"pulsar-bruce: error: {exc}", err=True)
        sys.exit(2)
    except OSError as exc:
        click.echo(f"pulsar-bruce: error: {directory}: {exc.strerror or exc}", err=True)
        sys.exit(1)


@spool.command("list")
@click.argument("directory", metavar="DIR")
def spool_list(directory: str) -> None:
    """One line per segment (bytes, records, messages from its read offset), then a total."""
    report = _inspect(directory)
    width = max((len(segment.name) for segment in report.segments), default=0)
    for segment in report.segments:
        line = (
            f"{segment.name:<{width}}  {segment.size:>10} bytes  {segment.records:>7} records"
            f"  {segment.messages:>8} messages"
        )
        if segment.offset:
            line += f"  (read up to byte {segment.offset})"
        if segment.damaged:
            line += "  DAMAGED (see spool check)"
        click.echo(line)
    for name in report.unknown:
        kind = "directory" if name.endswith("/") else "file"
        click.echo(f"{name}: unknown {kind}, not part of the spool (left alone)")
    _journal_line(report)
    click.echo(
        f"total: {_count(len(report.segments), 'segment')}, {report.size} bytes, "
        f"{_count(report.records, 'record')}, {_count(report.messages, 'message')}"
    )


@spool.command("check")
@click.argument("directory", metavar="DIR")
def spool_check(directory: str) -> None:
    """Read every segment as the replay would; exit 0 if all is intact, 1 if not."""
    report = _inspect(directory)
    if report.cursor_error:
        click.echo(f"cursor: unreadable ({report.cursor_error}): every segment would be "
                   "replayed from its start (possible duplicates)")  # fmt: skip
    for segment in report.damaged:
        click.echo(f"{segment.name}: {'; '.join(segment.problems())}")
    for name in report.cursor_gone:
        click.echo(f"note: the cursor names {name}, which is gone (read and deleted "
                   "before a crash; or removed or renamed, and what it held is lost)")  # fmt: skip
    for name in report.unknown:
        click.echo(f"note: {name} is not part of the spool (left alone)")
    _journal_line(report)
    summary = (
        f"{_count(len(report.segments), 'segment')}, {_count(report.records, 'record')}, "
        f"{_count(report.messages, 'message')} intact"
    )
    if report.intact:
        click.echo(f"checked {summary}: no damage")
        return
    click.echo(
        f"checked {summary}: {_count(len(report.damaged), 'damaged segment')}, "
        f"{_count(report.corrupt, 'corrupt record')}, "
        f"{_count(report.lost_messages, 'message')} known lost"
        + ("; the cursor is unreadable" if report.cursor_error else "")
    )
    sys.exit(1)


def _journal_line(report: SpoolReport) -> None:
    """The write-ahead journal: what the next start replays (after a crash), and its damage."""
    journal = report.journal
    if not report.journal_bytes and not journal.damaged_records:
        return
    sent = sum(batch.count for batch in journal.batches if batch.sequence_id >= 0)
    line = (
        f"journal: {report.journal_bytes} bytes, {_count(journal.messages, 'message')} to "
        f"replay at the next start ({sent} of them sent before: possible duplicates)"
    )
    if journal.damaged_records:
        line += (
            f"; DAMAGED: {_count(journal.damaged_records, 'corrupt record')}, "
            f"{_count(journal.lost_messages, 'message')} known lost"
        )
    click.echo(line)


@spool.command("empty")
@click.argument("directory", metavar="DIR")
@click.option("--yes", is_flag=True, help="really delete the segments and the cursor")
def spool_empty(directory: str, yes: bool) -> None:
    """Delete the segments and the cursor (never other files); needs --yes."""
    pid = daemon_using(Path(directory))
    if pid:
        click.echo(f"pulsar-bruce: error: {directory} is in use by a running pulsar-bruce "
                   f"(pid {pid}); stop it first", err=True)  # fmt: skip
        sys.exit(1)
    report = _inspect(directory)
    messages = _count(report.messages + report.journal.messages, "message")
    if report.corrupt and not report.lost_messages:
        messages = "at least " + messages
    elif report.lost_messages:
        messages += f" (and {report.lost_messages} in corrupt records)"
    segments = _count(len(report.segments), "segment")
    if not yes:
        click.echo(f"pulsar-bruce: would delete {messages} in {segments} of {directory}; "
                   "pass --yes to delete them", err=True)  # fmt: skip
        sys.exit(1)
    try:
        deleted = empty_spool(report)
    except OSError as exc:
        click.echo(f"pulsar-bruce: error: {exc}", err=True)
        sys.exit(1)
    left = f"; left alone: {', '.join(report.unknown)}" if report.unknown else ""
    click.echo(f"deleted {messages} in {segments} ({_count(len(deleted), 'file')}){left}")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


if __name__ == "__main__":
    main()

"""``pulsar-bruce``: the daemon's command line (foreground, systemd style)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from pulsar_bruce import __version__
from pulsar_bruce.config import OPTIONS, ConfigError, load_config
from pulsar_bruce.input.socket_reader import SocketInUseError
from pulsar_bruce.service.systemd import ActivationError

log = logging.getLogger("pulsar_bruce")


def _add_config_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(OPTIONS):
        command = click.option(
            option.flag,
            option.name,
            default=None,
            metavar=option.metavar,
            help=f"{option.help} [default: {option.default}; env {option.env}]",
        )(command)
    return command


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--config",
    "config_path",
    metavar="PATH",
    default=None,
    help="TOML file; every option below has a key there (same name, underscores)",
)
@_add_config_options
@click.version_option(__version__, prog_name="pulsar-bruce")
def main(config_path: str | None, **command_line: Any) -> None:
    """Receive Bruce datagrams on a UNIX socket and forward them to Apache Pulsar.

    Runs in the foreground. SIGTERM or SIGINT stops reading, delivers what is
    buffered (up to --shutdown-timeout-s) and exits 0.
    """
    config_path = config_path or os.environ.get("PULSAR_BRUCE_CONFIG")
    try:
        config = load_config(command_line, os.environ, config_path)
    except ConfigError as exc:
        click.echo(f"pulsar-bruce: error: {exc}", err=True)
        sys.exit(2)
    logging.basicConfig(
        level=config.log_level_number,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from pulsar_bruce.server import Server

    async def run() -> None:
        await Server(config).serve()

    try:
        import uvloop

        runner: Callable[..., Any] = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    try:
        runner(run())
    except (SocketInUseError, ActivationError, PermissionError, OSError) as exc:
        click.echo(f"pulsar-bruce: error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()

"""The command line (``cli.py``): one line per mistake, and ``--check-config`` refuses what the
start would."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner
from pulsar_bruce.cli import main
from pulsar_bruce.config.paths import SUN_PATH_BYTES

from tests.unit.daemon.config.helpers import socket_of_length


def _clean_env() -> dict[str, str | None]:
    return {name: None for name in os.environ if name.startswith("PULSAR_BRUCE_")}


def test_an_unknown_flag_is_one_line_with_a_suggestion() -> None:
    result = CliRunner().invoke(main, ["--sockit", "x"], env=_clean_env())
    assert result.exit_code == 2
    assert result.output == (
        "pulsar-bruce: error: No such option '--sockit'. "
        "(Did you mean one of: '--socket', '--socket-group', '--socket-mode'?)\n"
    )


def test_check_config_refuses_what_the_start_would(tmp_path: Path) -> None:
    too_long = socket_of_length(tmp_path, SUN_PATH_BYTES + 1)
    result = CliRunner().invoke(main, ["--check-config", "--socket", too_long], env=_clean_env())
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert result.output.startswith("pulsar-bruce: error: --socket: ")

"""``to_pulsar`` shell completion (click's protocol and ``--completion``) and ``--help`` text."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import to_pulsar

CLIENT_LIB = Path(to_pulsar.__file__).resolve().parents[1]


def cli_env(**extra: str) -> dict[str, str]:
    pythonpath = os.pathsep.join(filter(None, [str(CLIENT_LIB), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": pythonpath, **extra}


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "to_pulsar.cli", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=cli_env(**env),
        timeout=60,
    )


def complete(words: str, cword: int) -> list[str]:
    """Ask the CLI for bash completions the way click's bash script does."""
    result = run_cli(_TO_PULSAR_COMPLETE="bash_complete", COMP_WORDS=words, COMP_CWORD=str(cword))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout.splitlines()


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_option_prints_script(shell: str) -> None:
    result = run_cli("--completion", shell)  # no --topic: the option is eager and exits
    assert result.returncode == 0, result.stderr
    assert "_TO_PULSAR_COMPLETE" in result.stdout
    assert f"{shell}_complete" in result.stdout  # what the script asks the CLI for
    assert "to_pulsar" in result.stdout
    assert "Traceback" not in result.stderr


def test_completion_bash_script_registers_the_command() -> None:
    result = run_cli("--completion", "bash")
    assert "complete -o nosort -F _to_pulsar_completion to_pulsar" in result.stdout


def test_completion_unknown_shell_is_a_usage_error() -> None:
    result = run_cli("--completion", "tcsh")
    assert result.returncode == 2
    assert result.stderr.startswith("to_pulsar: error: ")
    assert "bash" in result.stderr


def test_completion_env_var_protocol_offers_options() -> None:
    assert "plain,--topic" in complete("to_pulsar --to", 1)
    offered = complete("to_pulsar --", 1)
    for option in ("--socket-path", "--value-size", "--count", "--interval-us", "--progress"):
        assert f"plain,{option}" in offered


def test_completion_env_var_protocol_completes_values() -> None:
    assert complete("to_pulsar --completion ", 2) == ["plain,bash", "plain,zsh", "plain,fish"]
    # The socket path completes as a file name (the shell script runs compgen -f).
    assert complete("to_pulsar --socket-path /ru", 2) == ["file,/ru"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_script_from_completion_option_completes(tmp_path: Path) -> None:
    """The printed script, sourced in a real bash, fills COMPREPLY through the CLI."""
    wrapper = tmp_path / "to_pulsar"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m to_pulsar.cli "$@"\n')
    wrapper.chmod(0o755)
    script = run_cli("--completion", "bash").stdout
    bash = (
        f"{script}\n"
        "COMP_WORDS=(to_pulsar --partition); COMP_CWORD=1\n"
        "_to_pulsar_completion to_pulsar\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    result = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", bash],
        capture_output=True,
        text=True,
        env=cli_env(PATH=f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["--partition-key", "--partition_key"]


def test_help_documents_examples_completion_and_exit_status() -> None:
    result = run_cli("--help", COLUMNS="100")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # Description and examples: single message, key, partition key, stdin, load generation.
    assert "Send a message to Apache Pulsar through the local pulsar-bruce daemon." in out
    assert "Examples:" in out
    examples = out.split("Examples:")[1].split("\n\n")[0]
    for needle in (
        "--value 'hello'", "--key user42", "--partition-key 7", "--stdin <",
        "--count 1000 --interval-us 500", "--value-size 1024 --count 1000000 --progress",
    ):  # fmt: skip
        assert needle in examples, needle
    # Completion, both click's environment variable and the convenience option.
    assert 'eval "$(_TO_PULSAR_COMPLETE=bash_source to_pulsar)"' in out
    assert 'eval "$(_TO_PULSAR_COMPLETE=zsh_source to_pulsar)"' in out
    assert "_TO_PULSAR_COMPLETE=fish_source to_pulsar" in out
    assert "--completion bash|zsh|fish" in out
    # Exit status: every code with its meaning.
    status = out.split("Exit status:")[1]
    lines = [line.split(None, 1) for line in status.strip().splitlines()]
    codes = {int(words[0]): words[1] for words in lines if words[0].isdigit()}
    assert set(codes) == {0, 1, 2, 130}
    assert "sent" in codes[0]
    assert "daemon is unavailable" in codes[1]
    assert "usage error" in codes[2]
    assert "interrupted" in codes[130]
    assert "timeout" in status and "too large" in status
    for option in ("--value-size", "--progress / --no-progress", "--completion SHELL"):
        assert option in out

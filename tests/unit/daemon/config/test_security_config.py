"""The security options: defaults, parsing from every source, errors that never show a token."""

from __future__ import annotations

import grp
import os
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from pulsar_bruce.cli import effective_config_toml, main
from pulsar_bruce.config import OPTIONS_BY_NAME, ConfigError, load_config
from pulsar_bruce.model.secret import Secret

TOKEN = "tok.eyJzdWIiOiJicnVjZSJ9.NOT-TO-BE-SHOWN-4711"


def write_toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "pulsar-bruce.toml"
    path.write_text(text)
    return str(path)


def test_defaults() -> None:
    config = load_config({}, {})
    assert config.socket_mode == 0o660
    assert config.socket_group is None
    assert config.metrics_listen == ("127.0.0.1", 9090)
    assert config.tls_ca_file is None
    assert config.tls_cert_file is None and config.tls_key_file is None
    assert config.tls_verify_hostname is True
    assert config.auth_token_file is None and config.auth_token is None


def test_flags_env_names_and_file_keys() -> None:
    assert OPTIONS_BY_NAME["tls_verify_hostname"].flag == "--tls-hostname-verification"
    assert OPTIONS_BY_NAME["tls_verify_hostname"].env == "PULSAR_BRUCE_TLS_VERIFY_HOSTNAME"
    assert OPTIONS_BY_NAME["auth_token_file"].env == "PULSAR_BRUCE_AUTH_TOKEN_FILE"
    assert OPTIONS_BY_NAME["socket_group"].flag == "--socket-group"
    assert "auth_token" not in OPTIONS_BY_NAME  # the token itself: environment only


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("false", False), ("TRUE", True), ("no", False), ("1", True), ("off", False)],
)
def test_hostname_verification_from_the_environment(raw: str, expected: bool) -> None:
    env = {"PULSAR_BRUCE_TLS_VERIFY_HOSTNAME": raw}
    assert load_config({}, env).tls_verify_hostname is expected


def test_hostname_verification_from_the_file_is_a_toml_bool(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "tls_verify_hostname = false\n")
    assert load_config({}, {}, path).tls_verify_hostname is False
    bad = write_toml(tmp_path, 'tls_verify_hostname = "maybe"\n')
    with pytest.raises(ConfigError, match=r"tls_verify_hostname: expected true or false"):
        load_config({}, {}, bad)


def test_the_command_line_switch_pair() -> None:
    runner, env = CliRunner(), _clean_env()
    on = runner.invoke(main, ["--check-config", "--tls-hostname-verification"], env=env)
    off = runner.invoke(main, ["--check-config", "--no-tls-hostname-verification"], env=env)
    assert "tls_verify_hostname = true" in on.output
    assert "tls_verify_hostname = false" in off.output


def test_tls_files_from_the_file(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        'tls_ca_file = "/etc/ca.pem"\ntls_cert_file = "/etc/c.pem"\ntls_key_file = "/etc/k.pem"\n',
    )
    config = load_config({}, {}, path)
    assert (config.tls_ca_file, config.tls_cert_file, config.tls_key_file) == (
        "/etc/ca.pem",
        "/etc/c.pem",
        "/etc/k.pem",
    )


@pytest.mark.parametrize("given", ["tls_cert_file", "tls_key_file"])
def test_client_certificate_and_key_go_together(given: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({given: "/etc/x.pem"}, {})
    message = str(caught.value)
    assert "--tls-cert-file and --tls-key-file go together" in message
    assert "\n" not in message


def test_socket_group_must_exist() -> None:
    with pytest.raises(ConfigError, match=r"^--socket-group: unknown group 'no-such-group-xyz'$"):
        load_config({"socket_group": "no-such-group-xyz"}, {})
    existing = grp.getgrgid(os.getgid()).gr_name
    assert load_config({"socket_group": existing}, {}).socket_group == existing
    assert load_config({"socket_group": str(os.getgid())}, {}).socket_group == str(os.getgid())


def test_socket_group_from_the_file_may_be_a_gid(tmp_path: Path) -> None:
    path = write_toml(tmp_path, f"socket_group = {os.getgid()}\n")
    assert load_config({}, {}, path).socket_group == str(os.getgid())


# -- the token ------------------------------------------------------------------------------------


def test_the_token_comes_from_the_environment_as_a_secret() -> None:
    config = load_config({}, {"PULSAR_BRUCE_AUTH_TOKEN": TOKEN + "\n"})
    assert config.auth_token == Secret(TOKEN)
    assert config.auth_token is not None and config.auth_token.reveal() == TOKEN
    assert TOKEN not in repr(config) and TOKEN not in str(config)
    assert TOKEN not in repr(config.auth_token) and TOKEN not in f"{config.auth_token}"


def test_the_token_is_not_a_file_key(tmp_path: Path) -> None:
    path = write_toml(tmp_path, f'auth_token = "{TOKEN}"\n')
    with pytest.raises(ConfigError) as caught:
        load_config({}, {}, path)
    assert "unknown key 'auth_token'" in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_an_empty_token_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"^PULSAR_BRUCE_AUTH_TOKEN: is set but empty$"):
        load_config({}, {"PULSAR_BRUCE_AUTH_TOKEN": "  \n"})


def test_a_token_and_a_token_file_are_one_too_many() -> None:
    env = {"PULSAR_BRUCE_AUTH_TOKEN": TOKEN, "PULSAR_BRUCE_AUTH_TOKEN_FILE": "/etc/token"}
    with pytest.raises(ConfigError) as caught:
        load_config({}, env)
    assert str(caught.value).startswith("--auth-token-file: PULSAR_BRUCE_AUTH_TOKEN is set too")
    assert TOKEN not in str(caught.value)


def test_other_errors_never_echo_the_token() -> None:
    env = {"PULSAR_BRUCE_AUTH_TOKEN": TOKEN, "PULSAR_BRUCE_LOG_LEVEL": "loud"}
    with pytest.raises(ConfigError) as caught:
        load_config({}, env)
    assert TOKEN not in str(caught.value)


def test_effective_config_shows_the_path_and_never_the_token(tmp_path: Path) -> None:
    from_file = load_config({"auth_token_file": "/etc/pulsar-bruce/token"}, {})
    text = effective_config_toml(from_file)
    assert 'auth_token_file = "/etc/pulsar-bruce/token"' in text
    from_env = load_config({}, {"PULSAR_BRUCE_AUTH_TOKEN": TOKEN})
    text = effective_config_toml(from_env)
    assert TOKEN not in text
    assert "# auth token: from PULSAR_BRUCE_AUTH_TOKEN (not shown)" in text
    assert "# auth_token_file: not set" in text
    tomllib.loads(text)  # still valid TOML
    path = write_toml(tmp_path, text)
    assert load_config({}, {}, path).tls_verify_hostname is True


def test_check_config_validates_the_token_file(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = tmp_path / "no-token"
    result = runner.invoke(main, ["--check-config", "--auth-token-file", str(missing)],
                           env=_clean_env())  # fmt: skip
    assert result.exit_code == 2
    assert f"--auth-token-file: cannot read {missing}" in result.output
    empty = tmp_path / "empty-token"
    empty.write_text("\n")
    result = runner.invoke(main, ["--check-config", "--auth-token-file", str(empty)],
                           env=_clean_env())  # fmt: skip
    assert result.exit_code == 2 and "is empty" in result.output


def _clean_env() -> dict[str, str | None]:
    """CliRunner env overrides: unset every PULSAR_BRUCE_* the test process may have."""
    return {name: None for name in os.environ if name.startswith("PULSAR_BRUCE_")}

"""The ``--oauth2-*`` options: every source, and the combinations that cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest
from pulsar_bruce.config import OPTIONS_BY_NAME, ConfigError, load_config
from pulsar_bruce.service.connection_options import oauth2_options

ISSUER = "https://auth.example.com/"
TOGETHER = "--oauth2-issuer-url and --oauth2-credentials-file go together"


def test_defaults_mean_no_oauth2() -> None:
    config = load_config({}, {})
    assert config.oauth2_issuer_url == "" and config.oauth2_credentials_file is None
    assert (config.oauth2_audience, config.oauth2_scope, config.oauth2_ca_file) == ("", "", None)
    assert oauth2_options(config) is None


def test_flags_and_environment_names() -> None:
    assert OPTIONS_BY_NAME["oauth2_issuer_url"].flag == "--oauth2-issuer-url"
    assert OPTIONS_BY_NAME["oauth2_credentials_file"].env == "PULSAR_BRUCE_OAUTH2_CREDENTIALS_FILE"


def test_from_the_environment_and_the_file(tmp_path: Path) -> None:
    toml = tmp_path / "pulsar-bruce.toml"
    toml.write_text('oauth2_audience = "urn:pulsar"\noauth2_scope = "produce"\n')
    env = {
        "PULSAR_BRUCE_OAUTH2_ISSUER_URL": ISSUER,
        "PULSAR_BRUCE_OAUTH2_CREDENTIALS_FILE": "/etc/pulsar-bruce/oauth2.json",
        "PULSAR_BRUCE_OAUTH2_CA_FILE": "/etc/pulsar-bruce/issuer-ca.pem",
    }
    options = oauth2_options(load_config({}, env, str(toml)))
    assert options is not None
    assert (options.issuer_url, options.credentials_file) == (
        ISSUER,
        "/etc/pulsar-bruce/oauth2.json",
    )
    assert (options.audience, options.scope, options.ca_file) == (
        "urn:pulsar",
        "produce",
        "/etc/pulsar-bruce/issuer-ca.pem",
    )


@pytest.mark.parametrize(
    ("command_line", "environ", "message"),
    [
        ({"oauth2_issuer_url": ISSUER}, {},
         f"--oauth2-credentials-file: {TOGETHER}"),
        ({"oauth2_credentials_file": "c.json"}, {},
         f"--oauth2-issuer-url: {TOGETHER}"),
        ({"oauth2_issuer_url": "auth.example.com", "oauth2_credentials_file": "c.json"}, {},
         "--oauth2-issuer-url: expected an https:// URL, got 'auth.example.com'"),
        ({"oauth2_issuer_url": ISSUER, "oauth2_credentials_file": "c.json",
          "auth_token_file": "t"}, {},
         "--oauth2-issuer-url: --auth-token-file is set too; use one or the other"),
        ({"oauth2_issuer_url": ISSUER, "oauth2_credentials_file": "c.json"},
         {"PULSAR_BRUCE_AUTH_TOKEN": "never-shown"},
         "--oauth2-issuer-url: PULSAR_BRUCE_AUTH_TOKEN is set too; use one or the other"),
    ],
)  # fmt: skip
def test_inconsistent_oauth2_options_are_one_clear_error(
    command_line: dict[str, str], environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(command_line, environ)
    assert str(caught.value) == message

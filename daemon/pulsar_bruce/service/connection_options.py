"""The broker connections' TLS context and credentials, from the ``--tls-*``, ``--auth-*``
and ``--oauth2-*`` options.

Built once at start (and by ``--check-config``), so an unusable certificate, key or
token file is one ``ConfigError`` naming the option, never a traceback later.
"""

from __future__ import annotations

from pulsar_bruce.config import Config, ConfigError
from pulsar_bruce.connection.oauth2 import OAuth2Options
from pulsar_bruce.connection.security import ConnectionSecurity, SecuritySetupError


def connection_security(config: Config) -> ConnectionSecurity:
    """The TLS context and credentials the options ask for (a ConfigError if unusable)."""
    try:
        return ConnectionSecurity.build(
            service_url=config.service_url,
            ca_file=config.tls_ca_file,
            cert_file=config.tls_cert_file,
            key_file=config.tls_key_file,
            verify_hostname=config.tls_verify_hostname,
            token_file=config.auth_token_file,
            token=config.auth_token,
            oauth2=oauth2_options(config),
            metrics_listen=config.metrics_listen,
        )
    except SecuritySetupError as exc:
        raise ConfigError(str(exc)) from None


def oauth2_options(config: Config) -> OAuth2Options | None:
    """The ``--oauth2-*`` options, or None when no issuer is configured."""
    if not config.oauth2_issuer_url or config.oauth2_credentials_file is None:
        return None
    return OAuth2Options(
        config.oauth2_issuer_url,
        config.oauth2_credentials_file,
        audience=config.oauth2_audience,
        scope=config.oauth2_scope,
        ca_file=config.oauth2_ca_file,
    )

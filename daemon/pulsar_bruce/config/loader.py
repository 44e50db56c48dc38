"""Resolving the configuration: command line, environment, file, default, in that order.

Every option has a command-line flag (``--buffer-max-bytes``), an environment
variable (``PULSAR_BRUCE_BUFFER_MAX_BYTES``) and a TOML key
(``buffer_max_bytes``).  An invalid value raises :class:`ConfigError` with one
line naming the option and the source it came from.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pulsar_bruce.config.model import (
    OPTIONS,
    OPTIONS_BY_NAME,
    TOPIC_OPTIONS,
    Config,
    TopicOverride,
    qualify_topic_pattern,
)
from pulsar_bruce.config.options import AUTH_TOKEN_ENV
from pulsar_bruce.config.paths import check_paths
from pulsar_bruce.model.secret import Secret
from pulsar_bruce.model.vocabulary import check_level


class ConfigError(Exception):
    """A bad option value; the message is the one line shown to the user."""


def load_config(
    command_line: Mapping[str, Any], environ: Mapping[str, str], config_path: str | None = None
) -> Config:
    """Resolve every option from its highest-precedence source and validate it."""
    file_values = _read_file(config_path) if config_path else {}
    values: dict[str, Any] = {}
    for option in OPTIONS:
        if command_line.get(option.name) is not None:
            raw, source = command_line[option.name], option.flag
        elif option.env in environ:
            raw, source = environ[option.env], option.env
        elif option.name in file_values:
            raw, source = file_values[option.name], f"{config_path}: {option.name}"
        else:
            raw, source = option.default, f"default of {option.flag}"
        try:
            values[option.name] = option.parse(raw)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{source}: {exc}") from None
    overrides = _topic_overrides(file_values.get("topics", {}), config_path)
    config = Config(
        **values,
        topic_overrides=overrides,
        auth_token=_auth_token(environ),
        config_file=str(Path(config_path).resolve()) if config_path else None,
    )
    _check_consistency(config)
    return config


def _read_file(path: str) -> dict[str, Any]:
    try:
        with Path(path).open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"--config: cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config: {path} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(OPTIONS_BY_NAME) - {"topics"})
    if unknown:
        hint = _nearest(unknown[0], [*OPTIONS_BY_NAME, "topics"])
        raise ConfigError(f"--config: {path}: unknown key {unknown[0]!r}{hint}")
    return data


def _nearest(key: str, names: Iterable[str]) -> str:
    """`` (did you mean 'NAME'?)`` for the name nearest a mistyped ``key``, if one is near."""
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _topic_overrides(tables: Any, path: str | None) -> tuple[TopicOverride, ...]:
    if not isinstance(tables, dict):
        raise ConfigError(f'{path}: topics: expected tables like [topics."name"]')
    overrides = []
    for pattern, table in tables.items():
        where = f"{path}: topics.{pattern!r}"
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: expected a table of options")
        try:
            qualified = qualify_topic_pattern(pattern)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        values = []
        for key, raw in table.items():
            if key not in TOPIC_OPTIONS:
                known = ", ".join(TOPIC_OPTIONS)
                if key in OPTIONS_BY_NAME:
                    problem = f"{key!r} cannot be set per topic (per-topic keys: {known})"
                else:
                    hint = _nearest(key, TOPIC_OPTIONS) or f" (per-topic keys: {known})"
                    problem = f"unknown key {key!r}{hint}"
                raise ConfigError(f"{where}: {problem}")
            try:
                values.append((key, OPTIONS_BY_NAME[key].parse(raw)))
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{where}.{key}: {exc}") from None
        overrides.append(TopicOverride(qualified, tuple(values)))
    return tuple(overrides)


def _auth_token(environ: Mapping[str, str]) -> Secret | None:
    """The token from the environment; error messages never include its value."""
    if AUTH_TOKEN_ENV not in environ:
        return None
    token = environ[AUTH_TOKEN_ENV].strip()
    if not token:
        raise ConfigError(f"{AUTH_TOKEN_ENV}: is set but empty")
    return Secret(token)


def _check_levels(config: Config) -> None:
    """A compression level must suit the codec it goes with, globally and per topic."""
    tables: list[tuple[str, dict[str, Any]]] = [("--compression-level", {})] + [
        (f"topics.{o.pattern!r}", dict(o.values)) for o in config.topic_overrides
    ]
    for where, values in tables:
        codec = values.get("compression", config.compression)
        level = values.get("compression_level", config.compression_level)
        try:
            check_level(codec, level)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None


def _check_consistency(config: Config) -> None:
    _check_levels(config)
    if config.batch_max_bytes > config.buffer_max_bytes:
        raise ConfigError("--batch-max-bytes: must not exceed --buffer-max-bytes")
    if (config.tls_cert_file is None) != (config.tls_key_file is None):
        missing = "--tls-key-file" if config.tls_key_file is None else "--tls-cert-file"
        raise ConfigError(
            f"{missing}: --tls-cert-file and --tls-key-file go together (give both or neither)"
        )
    if config.auth_token is not None and config.auth_token_file is not None:
        raise ConfigError(
            f"--auth-token-file: {AUTH_TOKEN_ENV} is set too; give the token one way only"
        )
    _check_oauth2(config)
    try:
        check_paths(config)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _check_oauth2(config: Config) -> None:
    """The issuer and the credentials go together, and replace a fixed token."""
    issuer, credentials = bool(config.oauth2_issuer_url), config.oauth2_credentials_file
    if issuer != (credentials is not None):
        missing = "--oauth2-credentials-file" if issuer else "--oauth2-issuer-url"
        raise ConfigError(
            f"{missing}: --oauth2-issuer-url and --oauth2-credentials-file go together"
        )
    if not issuer:
        return
    scheme = config.oauth2_issuer_url.split("://", 1)[0].lower()
    if scheme not in ("https", "http") or "://" not in config.oauth2_issuer_url:
        raise ConfigError(
            f"--oauth2-issuer-url: expected an https:// URL, got {config.oauth2_issuer_url!r}"
        )
    if config.auth_token is not None or config.auth_token_file is not None:
        given = "--auth-token-file" if config.auth_token_file else AUTH_TOKEN_ENV
        raise ConfigError(f"--oauth2-issuer-url: {given} is set too; use one or the other")

"""Daemon configuration: one table of options, three sources.

Every option has a command-line flag (``--buffer-max-bytes``), an environment
variable (``PULSAR_BRUCE_BUFFER_MAX_BYTES``) and a TOML key
(``buffer_max_bytes``).  Precedence: command line, environment, file, default.
An invalid value raises :class:`ConfigError` with one line naming the option.
"""

from __future__ import annotations

import logging
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from pulsar_bruce.batch.compression import CODECS
from pulsar_bruce.connection.auth import Secret
from pulsar_bruce.connection.pool import ServiceUrl
from pulsar_bruce.input.socket_reader import group_id

ENV_PREFIX = "PULSAR_BRUCE_"
#: The auth token itself (not a path); deliberately neither a flag nor a file key.
AUTH_TOKEN_ENV = ENV_PREFIX + "AUTH_TOKEN"


class ConfigError(Exception):
    """A bad option value; the message is the one line shown to the user."""


_SIZE = re.compile(r"\s*(\d+)\s*([kmg]i?b?|b)?\s*", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1000, "ki": 1024, "kib": 1024,
    "m": 1024**2, "mb": 1000**2, "mi": 1024**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1000**3, "gi": 1024**3, "gib": 1024**3,
}  # fmt: skip


def parse_size(text: str | int) -> int:
    """``256MiB``, ``128KiB``, ``10MB``, ``4096`` -> bytes."""
    if isinstance(text, bool):
        raise ValueError(f"expected a size like 256MiB or 65536, got {text!r}")
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.fullmatch(text)
        if not match:
            raise ValueError(f"expected a size like 256MiB or 65536, got {text!r}")
        value = int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").lower()]
    if value <= 0:
        raise ValueError(f"expected a positive size, got {text!r}")
    return value


def parse_octal_mode(text: str | int) -> int:
    """``"0660"`` (octal text) or, from TOML, an integer such as ``0o660``."""
    if isinstance(text, int) and not isinstance(text, bool):
        mode = text
    else:
        try:
            mode = int(_text(text), 8)
        except ValueError:
            raise ValueError(f"expected an octal mode like 0660, got {text!r}") from None
    if not 0 <= mode <= 0o777:
        raise ValueError(f"expected an octal mode between 0000 and 0777, got {text!r}")
    return mode


def parse_listen(text: str) -> tuple[str, int] | None:
    """``HOST:PORT`` or ``off``."""
    if _text(text).strip().lower() == "off":
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT or off, got {text!r}")
    return host.strip("[]"), int(port)


def parse_service_url(text: str) -> str:
    ServiceUrl.parse(_text(text))
    return text


def parse_log_level(text: str) -> str:
    level = _text(text).strip().lower()
    if level not in ("debug", "info", "warning", "error", "critical"):
        raise ValueError(f"expected debug, info, warning, error or critical, got {text!r}")
    return level


def parse_compression(text: str) -> str:
    name = _text(text).strip().lower()
    if name not in CODECS:
        raise ValueError(f"expected one of {', '.join(CODECS)}, got {text!r}")
    return name


def _text(value: object) -> str:
    """String options must be strings (TOML could hand us a number or a list)."""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _path(value: object) -> str:
    path = _text(value)
    if not path:
        raise ValueError("expected a path, got an empty string")
    return path


def _positive_int(text: str | int) -> int:
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise ValueError(f"expected a positive integer, got {text!r}")
    value = int(text)
    if value <= 0:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative_number(text: str | float) -> float:
    if isinstance(text, bool) or not isinstance(text, int | float | str):
        raise ValueError(f"expected a non-negative number, got {text!r}")
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"expected a non-negative number, got {text!r}")
    return value


def _non_negative_int(text: str | int) -> int:
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise ValueError(f"expected a non-negative integer, got {text!r}")
    value = int(text)
    if value < 0:
        raise ValueError(f"expected a non-negative integer, got {text!r}")
    return value


def _positive_number(text: str | float) -> float:
    value = _non_negative_number(text)
    if value == 0:
        raise ValueError(f"expected a positive number, got {text!r}")
    return value


def _optional_path(value: object) -> str | None:
    return None if value is None else _path(value)


def parse_bool(value: object) -> bool:
    """A TOML boolean, or ``true``/``false`` (also ``yes``/``no``, ``on``/``off``, ``1``/``0``)."""
    if isinstance(value, bool):
        return value
    text = _text(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def parse_group(value: object) -> str | None:
    """A group name or numeric id that exists (checked now, resolved again at bind)."""
    if value is None:
        return None
    name = str(value) if isinstance(value, int) and not isinstance(value, bool) else _text(value)
    name = name.strip()
    if not name:
        raise ValueError("expected a group name or id, got an empty string")
    try:
        group_id(name)
    except KeyError:
        raise ValueError(f"unknown group {name!r}") from None
    return name


def _optional_dir(value: object) -> str:
    """A directory path, or the empty string for "off"."""
    return _text(value).strip()


def parse_fsync_policy(value: object) -> str:
    policy = _text(value).strip().lower()
    if policy not in ("always", "interval", "never"):
        raise ValueError(f"expected always, interval or never, got {value!r}")
    return policy


@dataclass(frozen=True, slots=True)
class Option:
    name: str
    default: Any
    parse: Callable[[Any], Any]
    help: str
    metavar: str = "VALUE"
    #: Click declaration when it is not ``--<name>``, e.g. an on/off flag pair.
    cli_flag: str | None = None

    @property
    def flag(self) -> str:
        if self.cli_flag is not None:
            return self.cli_flag.split("/", 1)[0]
        return "--" + self.name.replace("_", "-")

    @property
    def is_switch(self) -> bool:
        """An on/off flag pair on the command line (true/false in the environment and file)."""
        return self.cli_flag is not None and "/" in self.cli_flag

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


OPTIONS: tuple[Option, ...] = (
    Option("socket", "/run/pulsar-bruce/bruce.sock", _path,
           "UNIX datagram socket to receive on (ignored under socket activation)", "PATH"),
    Option("socket_mode", "0660", parse_octal_mode, "permissions of the socket file", "OCTAL"),
    Option("socket_group", None, parse_group,
           "group of the socket file (name or id; default: the daemon's)", "NAME"),
    Option("service_url", "pulsar://localhost:6650", parse_service_url,
           "Pulsar service URL, pulsar:// or pulsar+ssl://", "URL"),
    Option("tls_ca_file", None, _optional_path,
           "PEM CA certificates to trust for pulsar+ssl:// (default: the system's)", "PATH"),
    Option("tls_cert_file", None, _optional_path,
           "PEM client certificate for pulsar+ssl:// (with --tls-key-file)", "PATH"),
    Option("tls_key_file", None, _optional_path,
           "PEM unencrypted private key of --tls-cert-file", "PATH"),
    Option("tls_verify_hostname", True, parse_bool,
           "check the broker certificate's name against the host connected to", "",
           "--tls-hostname-verification/--no-tls-hostname-verification"),
    Option("auth_token_file", None, _optional_path,
           "file holding a Pulsar auth token, re-read for every new connection "
           f"(or the token itself in ${AUTH_TOKEN_ENV})", "PATH"),
    Option("metrics_listen", "127.0.0.1:9090", parse_listen,
           "Prometheus /metrics address, or off", "HOST:PORT"),
    Option("buffer_max_bytes", "256MiB", parse_size,
           "memory for messages not yet acknowledged", "SIZE"),
    Option("log_level", "info", parse_log_level, "debug, info, warning, error", "LEVEL"),
    Option("max_message_bytes", "5MiB", parse_size,
           "largest message (datagram or stream record); larger ones are too_large", "SIZE"),
    Option("batch_max_messages", 1000, _positive_int, "messages per batch at most", "N"),
    Option("batch_max_bytes", "128KiB", parse_size, "bytes per batch at most", "SIZE"),
    Option("batch_max_delay_ms", 10.0, _non_negative_number,
           "longest a message waits for its batch to fill", "MS"),
    Option("compression", "lz4", parse_compression, "batch compression: none, lz4, zlib", "NAME"),
    Option("rate_limit_messages", 0, _non_negative_int,
           "messages per topic per rate-limit interval; beyond: rate_limited (0: no limit)", "N"),
    Option("rate_limit_interval_s", 1.0, _positive_number,
           "length of the rate-limit interval", "SECONDS"),
    Option("shutdown_timeout_s", 30.0, _non_negative_number,
           "on SIGTERM/SIGINT, how long to wait for receipts before discarding", "SECONDS"),
    Option("send_timeout_s", 30.0, _non_negative_number,
           "a batch not acked this long after it was sealed is discarded as send_timeout "
           "(0: never)", "SECONDS"),
    Option("max_send_attempts", 10, _non_negative_int,
           "a batch written this many times is discarded as retries_exhausted (0: no limit)",
           "N"),
    Option("receipt_timeout_s", 30.0, _positive_number,
           "a batch unconfirmed this long makes the daemon reconnect and resend", "SECONDS"),
    Option("stream_socket", "auto", _text,
           "UNIX stream socket for confirmed delivery (flush requests); auto: next to --socket "
           "(bruce.sock -> bruce.stream.sock); off: none", "PATH"),
    Option("spool_dir", "", _optional_dir,
           "directory of the disk spool; empty: no spool (overflow is discarded as buffer_full)",
           "PATH"),
    Option("spool_max_bytes", "1GiB", parse_size, "size cap of the disk spool", "SIZE"),
    Option("spool_fsync", "interval", parse_fsync_policy,
           "always (every record), interval (about once a second) or never", "POLICY"),
    Option("spool_after_s", 10.0, _non_negative_number,
           "with a spool: no broker reachable this long sends new messages to disk", "SECONDS"),
    Option("producer_name_prefix", "auto", _text,
           "producer names stable across restarts (auto: from host and socket; empty: "
           "the broker names them)", "TEXT"),
    Option("discard_log", "", _optional_dir,
           "file for one JSON line per discarded or possibly duplicated message (empty: off)",
           "PATH"),
    Option("discard_log_max_bytes", "64MiB", parse_size,
           "size at which the discard log is rotated", "SIZE"),
    Option("discard_log_archives", 5, _non_negative_int,
           "rotated discard logs kept", "N"),
    Option("metadata_refresh_s", 60.0, _non_negative_number,
           "how often partition counts are re-checked (0: never)", "SECONDS"),
)  # fmt: skip
OPTIONS_BY_NAME = {option.name: option for option in OPTIONS}

#: Options a ``[topics."pattern"]`` table of the config file may override.
TOPIC_OPTIONS = (
    "max_message_bytes",
    "batch_max_messages",
    "batch_max_bytes",
    "batch_max_delay_ms",
    "compression",
    "rate_limit_messages",
    "rate_limit_interval_s",
)


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """The per-topic options, resolved for one topic."""

    max_message_bytes: int
    batch_max_messages: int
    batch_max_bytes: int
    batch_max_delay_ms: float
    compression: str
    rate_limit_messages: int
    rate_limit_interval_s: float


@dataclass(frozen=True, slots=True)
class TopicOverride:
    """One ``[topics."pattern"]`` table: a full topic name or a glob over full names."""

    pattern: str
    values: tuple[tuple[str, Any], ...]

    @property
    def is_glob(self) -> bool:
        return any(char in self.pattern for char in "*?[")


def qualify_topic_pattern(pattern: str) -> str:
    """``t*`` -> ``persistent://public/default/t*``; ``tenant/ns/*`` -> ``persistent://tenant/ns/*``."""
    if "://" in pattern:
        return pattern
    slashes = pattern.count("/")
    if slashes == 0:
        return f"persistent://public/default/{pattern}"
    if slashes == 2:
        return f"persistent://{pattern}"
    raise ValueError(
        f"expected a topic name or glob like t, tenant/ns/t or persistent://..., got {pattern!r}"
    )


@dataclass(frozen=True, slots=True)
class Config:
    socket: str
    socket_mode: int
    service_url: str
    metrics_listen: tuple[str, int] | None
    buffer_max_bytes: int
    log_level: str
    max_message_bytes: int
    batch_max_messages: int
    batch_max_bytes: int
    batch_max_delay_ms: float
    compression: str
    shutdown_timeout_s: float
    send_timeout_s: float
    max_send_attempts: int
    receipt_timeout_s: float
    stream_socket: str
    spool_dir: str
    spool_max_bytes: int
    spool_fsync: str
    spool_after_s: float
    producer_name_prefix: str
    discard_log: str
    discard_log_max_bytes: int
    discard_log_archives: int
    metadata_refresh_s: float
    rate_limit_messages: int = 0
    rate_limit_interval_s: float = 1.0
    topic_overrides: tuple[TopicOverride, ...] = ()
    socket_group: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_verify_hostname: bool = True
    auth_token_file: str | None = None
    #: From $PULSAR_BRUCE_AUTH_TOKEN; a Secret, so no repr or log line shows it.
    auth_token: Secret | None = None

    def topic_settings(self, topic: str) -> TopicSettings:
        """The options for ``topic`` (a full name): an exact override wins over the first
        matching glob; options an override leaves out come from the global ones."""
        values = {name: getattr(self, name) for name in TOPIC_OPTIONS}
        exact = [o for o in self.topic_overrides if not o.is_glob and o.pattern == topic]
        globbed = [o for o in self.topic_overrides if o.is_glob and fnmatchcase(topic, o.pattern)]
        for override in (exact or globbed)[:1]:
            values.update(override.values)
        return TopicSettings(**values)

    @property
    def stream_socket_path(self) -> str | None:
        """Where the stream socket goes (None: off)."""
        if self.stream_socket.strip().lower() == "off" or not self.stream_socket.strip():
            return None
        if self.stream_socket == "auto":
            base = self.socket.removesuffix(".sock")
            return f"{base}.stream.sock"
        return self.stream_socket

    @property
    def log_level_number(self) -> int:
        return int(logging.getLevelName(self.log_level.upper()))


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
        raise ConfigError(f"--config: {path}: unknown key {unknown[0]!r}")
    return data


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
    config = Config(**values, topic_overrides=overrides, auth_token=_auth_token(environ))
    _check_consistency(config)
    return config


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
                raise ConfigError(
                    f"{where}: {key!r} cannot be set per topic (expected one of "
                    f"{', '.join(TOPIC_OPTIONS)})"
                )
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


def _check_consistency(config: Config) -> None:
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

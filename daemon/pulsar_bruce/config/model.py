"""The configuration model: every option, declared once, as a field with its metadata.

:class:`Config` is the whole resolved configuration.  It is assembled from
three parts so that the per-topic options are declared once and the option
table keeps its order: the process options (:class:`_ProcessOptions`), the
per-topic options (:class:`TopicSettings`, which ``Config`` holds as the
global values every topic starts from) and the delivery options declared on
``Config`` itself.  ``OPTIONS`` and ``TOPIC_OPTIONS`` are read from the fields.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from pulsar_bruce.config.options import AUTH_TOKEN_ENV, Option, option, options_of
from pulsar_bruce.config.values import (
    parse_batch_delay_ms,
    parse_bool,
    parse_compression,
    parse_compression_level,
    parse_encryption_keys,
    parse_fsync_policy,
    parse_group,
    parse_key_routing,
    parse_listen,
    parse_log_level,
    parse_non_negative_int,
    parse_non_negative_number,
    parse_octal_mode,
    parse_optional_dir,
    parse_optional_path,
    parse_path,
    parse_path_text,
    parse_positive_int,
    parse_positive_number,
    parse_schema,
    parse_service_url,
    parse_size,
    parse_text,
)
from pulsar_bruce.model.schema import ProducerSchema
from pulsar_bruce.model.secret import Secret
from pulsar_bruce.model.vocabulary import Compression, FsyncPolicy, KeyRouting

# Options appear in --help and --check-config in field order: the fields of
# _ProcessOptions, then TopicSettings, then Config's own (a dataclass lists a
# base's fields before its subclass's, the last base's first).


@dataclass(frozen=True, kw_only=True)
class _ProcessOptions:
    """Sockets, broker, security, metrics, memory, logging."""

    # fmt: off
    socket: str = option(
        "/run/pulsar-bruce/bruce.sock", parse_path,
        "UNIX datagram socket to receive on (ignored under socket activation)", "PATH")
    socket_mode: int = option(
        "0660", parse_octal_mode, "permissions of the socket file", "OCTAL")
    socket_group: str | None = option(
        None, parse_group, "group of the socket file (name or id; default: the daemon's)", "NAME")
    service_url: str = option(
        "pulsar://localhost:6650", parse_service_url,
        "Pulsar service URL, pulsar:// or pulsar+ssl://", "URL")
    advertised_listener: str = option(
        "", parse_text,
        "listener name sent in lookups, for clusters that advertise several "
        "(empty: the broker's default)", "NAME")
    tls_ca_file: str | None = option(
        None, parse_optional_path,
        "PEM CA certificates to trust for pulsar+ssl:// (default: the system's)", "PATH")
    tls_cert_file: str | None = option(
        None, parse_optional_path,
        "PEM client certificate for pulsar+ssl:// (with --tls-key-file)", "PATH")
    tls_key_file: str | None = option(
        None, parse_optional_path, "PEM unencrypted private key of --tls-cert-file", "PATH")
    tls_verify_hostname: bool = option(
        True, parse_bool, "check the broker certificate's name against the host connected to", "",
        "--tls-hostname-verification/--no-tls-hostname-verification")
    auth_token_file: str | None = option(
        None, parse_optional_path,
        "file holding a Pulsar auth token, re-read for every new connection "
        f"(or the token itself in ${AUTH_TOKEN_ENV})", "PATH")
    oauth2_issuer_url: str = option(
        "", parse_text,
        "OAuth2 issuer (https://...) whose OpenID metadata names the token endpoint; "
        "with --oauth2-credentials-file, its access tokens authenticate us", "URL")
    oauth2_credentials_file: str | None = option(
        None, parse_optional_path,
        "JSON file with the OAuth2 client_id and client_secret (client credentials)", "PATH")
    oauth2_audience: str = option(
        "", parse_text, "audience asked for in OAuth2 tokens (empty: none sent)", "TEXT")
    oauth2_scope: str = option(
        "", parse_text, "scope asked for in OAuth2 tokens (empty: none sent)", "TEXT")
    oauth2_ca_file: str | None = option(
        None, parse_optional_path,
        "PEM CA certificates to trust for the OAuth2 issuer (default: the system's)", "PATH")
    metrics_listen: tuple[str, int] | None = option(
        "127.0.0.1:9090", parse_listen, "Prometheus /metrics address, or off", "HOST:PORT")
    buffer_max_bytes: int = option(
        "256MiB", parse_size, "memory for messages not yet acknowledged", "SIZE")
    log_level: str = option(
        "info", parse_log_level, "debug, info, warning, error", "LEVEL")
    # fmt: on


@dataclass(frozen=True, kw_only=True)
class TopicSettings:
    """The options a ``[topics."pattern"]`` table may override, resolved for one topic."""

    # fmt: off
    max_message_bytes: int = option(
        "64MiB", parse_size,
        "largest message (datagram or stream record); larger ones are too_large; "
        "messages over the broker's max message size are sent as chunks", "SIZE")
    batch_max_messages: int = option(
        1000, parse_positive_int, "messages per batch at most", "N")
    batch_max_bytes: int = option(
        "128KiB", parse_size, "bytes per batch at most", "SIZE")
    batch_max_delay_ms: float = option(
        10.0, parse_batch_delay_ms,
        "longest a message waits for its batch to fill (at most 60000)", "MS")
    compression: Compression = option(  # noqa: RUF009 - option() returns a field()
        "lz4", parse_compression, f"batch compression: {', '.join(Compression)}", "NAME")
    compression_level: int = option(
        0, parse_compression_level,
        "level for zstd (1..22) and zlib (1..9); 0: the codec's default (zstd 3, zlib 6)", "N")
    rate_limit_messages: int = option(
        0, parse_non_negative_int,
        "messages per topic per rate-limit interval; beyond: rate_limited (0: no limit)", "N")
    rate_limit_interval_s: float = option(
        1.0, parse_positive_number, "length of the rate-limit interval", "SECONDS")
    key_routing: KeyRouting = option(  # noqa: RUF009 - option() returns a field()
        "none", parse_key_routing,
        "partition of an AnyPartition message with a key: none (round-robin), java_string "
        "or murmur3 (the Java client's hashes of the key)", "NAME")
    key_based_batching: bool = option(
        False, parse_bool,
        "a batch holds messages of one key only and carries that key (for Key_Shared "
        "subscriptions)", "", "--key-based-batching/--no-key-based-batching")
    schema: ProducerSchema = option(  # noqa: RUF009 - option() returns a field()
        "bytes", parse_schema,
        "schema the producers declare: bytes (none), string, json:FILE or avro:FILE (FILE: an "
        "Avro record schema, read at start); payloads are sent as they are", "SCHEMA")
    encryption_keys: tuple[str, ...] = option(
        "", parse_encryption_keys,
        "encrypt payloads end to end for these PEM RSA public keys, as the official clients do: "
        "NAME=PATH or PATH (named after its file), comma-separated; empty: off", "KEYS")
    # fmt: on


@dataclass(frozen=True, slots=True)
class TopicOverride:
    """One ``[topics."pattern"]`` table: a full topic name or a glob over full names."""

    pattern: str
    values: tuple[tuple[str, Any], ...]

    @property
    def is_glob(self) -> bool:
        return any(char in self.pattern for char in "*?[")


@dataclass(frozen=True, kw_only=True)
class Config(TopicSettings, _ProcessOptions):
    """The resolved configuration; its per-topic fields are the global values."""

    # fmt: off
    shutdown_timeout_s: float = option(
        30.0, parse_non_negative_number,
        "on SIGTERM/SIGINT, how long to wait for receipts before discarding", "SECONDS")
    send_timeout_s: float = option(
        0.0, parse_non_negative_number,
        "a batch not acked this long after it was sealed is given up: as send_timeout, or as "
        "unconfirmed if it had been written to a broker (0, the default: never; the buffer "
        "and the spool bound what waits)", "SECONDS")
    max_send_attempts: int = option(
        10, parse_non_negative_int,
        "a batch the broker failed this many times (send error, overdue or mismatched "
        "receipt) is discarded as retries_exhausted (as unconfirmed if a write of it was "
        "never answered); resends after a lost connection or a producer the broker closed "
        "(restart, unload), and a broker that cannot tell yet whether a resend is a "
        "duplicate (an earlier write still being persisted), do not count (0: no limit)", "N")
    receipt_timeout_s: float = option(
        30.0, parse_positive_number,
        "a batch unconfirmed this long makes the daemon reconnect and resend", "SECONDS")
    stream_socket: str = option(
        "auto", parse_path_text,
        "UNIX stream socket for confirmed delivery (flush requests); auto: next to --socket "
        "(bruce.sock -> bruce.stream.sock); off: none", "PATH")
    stream_max_connections: int = option(
        256, parse_positive_int,
        "stream connections open at once at most; beyond, a new one is closed at once", "N")
    spool_dir: str = option(
        "", parse_optional_dir,
        "directory of the disk spool; empty: no spool (overflow is discarded as buffer_full)",
        "PATH")
    spool_max_bytes: int = option(
        "1GiB", parse_size, "size cap of the disk spool", "SIZE")
    spool_fsync: FsyncPolicy = option(  # noqa: RUF009 - option() returns a field()
        "interval", parse_fsync_policy,
        "always (every record), interval (about once a second) or never", "POLICY")
    spool_journal: bool = option(
        True, parse_bool,
        "with --spool-dir: journal what is read before it is acknowledged, so a crash of the "
        "daemon loses none of it (replayed at the next start)", "",
        "--spool-journal/--no-spool-journal")
    spool_after_s: float = option(
        10.0, parse_non_negative_number,
        "with a spool: no broker reachable this long sends new messages to disk", "SECONDS")
    producer_name_prefix: str = option(
        "auto", parse_text,
        "producer names stable across restarts: PREFIX-<host>-<hash of --socket> "
        "(auto: pulsar-bruce-<host>-<hash>; empty: the broker names them)", "TEXT")
    discard_log: str = option(
        "", parse_optional_dir,
        "file for one JSON line per discarded or possibly duplicated message (empty: off)",
        "PATH")
    discard_log_max_bytes: int = option(
        "64MiB", parse_size, "size at which the discard log is rotated", "SIZE")
    discard_log_archives: int = option(
        5, parse_non_negative_int, "rotated discard logs kept", "N")
    metadata_refresh_s: float = option(
        60.0, parse_non_negative_number,
        "how often partition counts are re-checked (0: never)", "SECONDS")
    # fmt: on

    # Not options: from [topics."..."] tables and from $PULSAR_BRUCE_AUTH_TOKEN.
    topic_overrides: tuple[TopicOverride, ...] = ()
    #: A Secret, so no repr or log line shows it.
    auth_token: Secret | None = None
    #: The file the configuration was read from (``--config``), for ``/status``.
    config_file: str | None = None

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


#: Every option, in the order of ``--help``.
OPTIONS: tuple[Option, ...] = options_of(Config)
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}
#: Options a ``[topics."pattern"]`` table of the config file may override.
TOPIC_OPTIONS: tuple[str, ...] = tuple(o.name for o in options_of(TopicSettings))


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

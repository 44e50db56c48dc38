"""Value parsers: one per kind of option value, each raising ``ValueError`` with the reason.

A value comes from the command line or the environment (text) or from the
TOML file (text, or a number, a boolean, ...); every parser takes any of
these and refuses what does not fit.  The loader adds which option and
source it was.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import PurePath

from pulsar_bruce.model.group_lookup import group_id
from pulsar_bruce.model.schema import ProducerSchema
from pulsar_bruce.model.service_url import ServiceUrl
from pulsar_bruce.model.vocabulary import Compression, FsyncPolicy, KeyRouting

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

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
            mode = int(parse_text(text), 8)
        except ValueError:
            raise ValueError(f"expected an octal mode like 0660, got {text!r}") from None
    if not 0 <= mode <= 0o777:
        raise ValueError(f"expected an octal mode between 0000 and 0777, got {text!r}")
    return mode


def parse_listen(text: str) -> tuple[str, int] | None:
    """``HOST:PORT`` or ``off``."""
    if parse_text(text).strip().lower() == "off":
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT or off, got {text!r}")
    return host.strip("[]"), int(port)


def parse_service_url(text: str) -> str:
    ServiceUrl.parse(parse_text(text))
    return text


def parse_log_level(text: str) -> str:
    level = parse_text(text).strip().lower()
    if level not in LOG_LEVELS:
        raise ValueError(f"expected {_either(LOG_LEVELS)}, got {text!r}")
    return level


def parse_compression(text: str) -> Compression:
    name = parse_text(text).strip().lower()
    if name not in tuple(Compression):
        raise ValueError(f"expected one of {', '.join(Compression)}, got {text!r}")
    return Compression(name)


def parse_compression_level(text: str | int) -> int:
    """0 (the codec's default) or a level; the codec's own range is checked with the codec."""
    level = parse_non_negative_int(text)
    if level > 22:
        raise ValueError(f"expected a level between 0 and 22, got {text!r}")
    return level


def parse_key_routing(value: object) -> KeyRouting:
    routing = parse_text(value).strip().lower()
    if routing not in tuple(KeyRouting):
        raise ValueError(f"expected {_either(KeyRouting)}, got {value!r}")
    return KeyRouting(routing)


def parse_fsync_policy(value: object) -> FsyncPolicy:
    policy = parse_text(value).strip().lower()
    if policy not in tuple(FsyncPolicy):
        raise ValueError(f"expected {_either(FsyncPolicy)}, got {value!r}")
    return FsyncPolicy(policy)


def parse_schema(value: object) -> ProducerSchema:
    """``bytes``, ``string``, ``json:FILE`` or ``avro:FILE``: the file is read and checked now,
    so a missing or malformed schema stops the start (and a SIGHUP keeps the old one)."""
    return ProducerSchema.parse(parse_path_text(value).strip(), _read_schema_file)


def _read_schema_file(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None


def parse_encryption_keys(value: object) -> tuple[str, ...]:
    """Public keys to encrypt payloads for, as ``NAME=PATH`` each: ``NAME=PATH`` or ``PATH``
    (named after its file, ``keys/app.pem`` -> ``app``), comma-separated or a TOML list;
    empty: no encryption.  The files are read at start (``batch/encryption.py``)."""
    items = value if isinstance(value, list) else parse_text(value).split(",")
    specs: dict[str, str] = {}
    for item in items:
        text = parse_path_text(item).strip()
        if not text:
            continue
        name, named, path = text.partition("=")
        if not named or "/" in name:  # a path (which may hold a "=")
            name, path = PurePath(text).stem, text
        name, path = name.strip(), path.strip()
        if not name or not path:
            raise ValueError(f"expected NAME=PATH or PATH, got {text!r}")
        if name in specs:
            raise ValueError(f"key name {name!r} is given twice")
        specs[name] = path
    return tuple(f"{name}={path}" for name, path in specs.items())


def _either(words: Iterable[str]) -> str:
    """``("a", "b", "c")`` -> ``"a, b or c"``."""
    *most, last = words
    return f"{', '.join(most)} or {last}" if most else last


def parse_text(value: object) -> str:
    """String options must be strings (TOML could hand us a number or a list)."""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def parse_path(value: object) -> str:
    path = parse_path_text(value)
    if not path:
        raise ValueError("expected a path, got an empty string")
    return path


def parse_path_text(value: object) -> str:
    """Text naming a file: a NUL byte cannot be in a path (the start would die on it)."""
    text = parse_text(value)
    if "\0" in text:
        raise ValueError(f"expected a path without NUL bytes, got {text!r}")
    return text


def parse_optional_path(value: object) -> str | None:
    return None if value is None else parse_path(value)


def parse_optional_dir(value: object) -> str:
    """A path, or the empty string for "off"."""
    return parse_path_text(value).strip()


def parse_positive_int(text: str | int) -> int:
    value = _integer(text, "a positive integer")
    if value <= 0:
        raise ValueError(f"expected a positive integer, got {text!r}")
    return value


def parse_non_negative_int(text: str | int) -> int:
    value = _integer(text, "a non-negative integer")
    if value < 0:
        raise ValueError(f"expected a non-negative integer, got {text!r}")
    return value


def _integer(text: object, expected: str) -> int:
    """``int(text)``, but a refusal says what was expected instead of Python's own words."""
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise ValueError(f"expected {expected}, got {text!r}")
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected {expected}, got {text!r}") from None


def parse_non_negative_number(text: str | float) -> float:
    if isinstance(text, bool) or not isinstance(text, int | float | str):
        raise ValueError(f"expected a non-negative number, got {text!r}")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a non-negative number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"expected a non-negative number, got {text!r}")
    return value


#: The longest a batch may linger: beyond it a "delay" is a typo (1e308 would never send).
MAX_BATCH_DELAY_MS = 60_000


def parse_batch_delay_ms(text: str | float) -> float:
    """Milliseconds a message may wait for its batch to fill, 0 to 60000."""
    value = parse_non_negative_number(text)
    if value > MAX_BATCH_DELAY_MS:
        raise ValueError(f"expected milliseconds between 0 and {MAX_BATCH_DELAY_MS}, got {text!r}")
    return value


def parse_positive_number(text: str | float) -> float:
    value = parse_non_negative_number(text)
    if value == 0:
        raise ValueError(f"expected a positive number, got {text!r}")
    return value


def parse_bool(value: object) -> bool:
    """A TOML boolean, or ``true``/``false`` (also ``yes``/``no``, ``on``/``off``, ``1``/``0``)."""
    if isinstance(value, bool):
        return value
    text = parse_text(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def parse_group(value: object) -> str | None:
    """A group name or numeric id that exists (checked now, resolved again at bind)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        name = str(value)
    else:
        name = parse_text(value)
    name = name.strip()
    if not name:
        raise ValueError("expected a group name or id, got an empty string")
    try:
        group_id(name)
    except KeyError:
        raise ValueError(f"unknown group {name!r}") from None
    return name

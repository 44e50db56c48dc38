"""The daemon's topic-name rule, on the sending side, so a bad name fails before it is sent.

Without it a message to ``bad topic`` or ``a/b/c/d`` is sent, then discarded by the
daemon as ``bad_topic``, and the sender (exit 0) never hears of it. The daemon keeps
its own copy (``pulsar_bruce.parse.topic``: neither package imports the other); a
property test runs both over generated names and asserts they agree.
"""

from __future__ import annotations

import re

from .errors import InvalidMessageError

MAX_TOPIC_SIZE = 0x7FFF  # TopicSize is an int16
DOMAINS = ("persistent", "non-persistent")
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"

# Pulsar's rule for tenant and namespace names.
_NAMED_ENTITY = re.compile(r"[-=:.\w]+", re.ASCII)
# A local topic name: no slash, no whitespace or control characters.
_LOCAL_NAME = re.compile(r"[^/\s\x00-\x1f\x7f-\x9f]+")
_FORMS = "t, tenant/namespace/t or persistent://tenant/namespace/t"

#: Names already found valid (raw bytes): the per-message check is one set lookup.
_valid: set[bytes] = set()


def full_topic_name(raw: bytes) -> str:
    """The full ``domain://tenant/namespace/topic`` name the daemon will use, or raise
    :class:`InvalidMessageError` saying what is wrong (as the daemon's ``normalize_topic``)."""
    if not 0 < len(raw) <= MAX_TOPIC_SIZE:
        raise InvalidMessageError(
            f"topic must be 1..{MAX_TOPIC_SIZE} bytes of UTF-8, got {len(raw)} bytes"
        )
    try:
        name = bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidMessageError(f"topic {bytes(raw)!r} is not UTF-8") from None
    shown = name
    qualified = "://" in name
    domain = "persistent"
    if qualified:
        domain, _, name = name.partition("://")
        if domain not in DOMAINS:
            raise InvalidMessageError(
                f"invalid topic {shown!r}: the domain must be persistent or non-persistent"
            )
    parts = name.split("/")
    if len(parts) == 3:
        tenant, namespace, local = parts
    elif len(parts) == 1 and not qualified:
        tenant, namespace, local = DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]
    else:
        raise InvalidMessageError(f"invalid topic {shown!r}: expected {_FORMS}")
    for what, part in (("tenant", tenant), ("namespace", namespace)):
        if not _NAMED_ENTITY.fullmatch(part):
            raise InvalidMessageError(
                f"invalid topic {shown!r}: the {what} must be ASCII letters, digits "
                "and - = : . _ only"
            )
    if not _LOCAL_NAME.fullmatch(local):
        raise InvalidMessageError(
            f"invalid topic {shown!r}: the topic's own name must be non-empty, "
            "without whitespace or control characters"
        )
    return f"{domain}://{tenant}/{namespace}/{local}"


def check_topic(raw: bytes) -> None:
    """Raise :class:`InvalidMessageError` unless the daemon accepts ``raw`` as a topic name;
    cached, since it runs for every message encoded."""
    if type(raw) is bytes and raw in _valid:
        return
    full_topic_name(raw)
    if len(_valid) >= 4096:
        _valid.clear()
    _valid.add(bytes(raw))

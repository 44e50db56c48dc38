"""Bruce topic names -> fully qualified Pulsar topic names."""

from __future__ import annotations

import re

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
_DOMAINS = ("persistent", "non-persistent")

# Pulsar's rule for tenant and namespace names.
_NAMED_ENTITY = re.compile(r"[-=:.\w]+", re.ASCII)
# A local topic name: no slash, no whitespace or control characters.
_LOCAL_NAME = re.compile(r"[^/\s\x00-\x1f\x7f-\x9f]+")
_PARTITION_SUFFIX = re.compile(r"-partition-(\d+)\Z")


def normalize_topic(raw: bytes) -> str | None:
    """The full ``domain://tenant/namespace/topic`` name, or ``None`` if invalid.

    ``t`` -> ``persistent://public/default/t``; ``tenant/ns/t`` ->
    ``persistent://tenant/ns/t``; full names are kept as they are.
    """
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    qualified = "://" in name
    domain = "persistent"
    if qualified:
        domain, _, name = name.partition("://")
        if domain not in _DOMAINS:
            return None
    parts = name.split("/")
    if len(parts) == 3:
        tenant, namespace, local = parts
    elif len(parts) == 1 and not qualified:
        tenant, namespace, local = DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]
    else:
        return None
    if not (_NAMED_ENTITY.fullmatch(tenant) and _NAMED_ENTITY.fullmatch(namespace)):
        return None
    if not _LOCAL_NAME.fullmatch(local):
        return None
    return f"{domain}://{tenant}/{namespace}/{local}"


def is_partition_name(topic: str) -> bool:
    """True for ``...-partition-N``: such a topic is addressed directly, never as partitioned."""
    return _PARTITION_SUFFIX.search(topic) is not None


def partition_name(topic: str, index: int) -> str:
    return f"{topic}-partition-{index}"

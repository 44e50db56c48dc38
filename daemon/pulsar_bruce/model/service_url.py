"""A parsed Pulsar service URL: checked by the configuration, used by the connection pool."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class ServiceUrl:
    """A parsed ``pulsar://host:port[,host:port...]`` or ``pulsar+ssl://...``."""

    tls: bool
    hosts: tuple[tuple[str, int], ...]

    @classmethod
    def parse(cls, url: str) -> ServiceUrl:
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in ("pulsar", "pulsar+ssl"):
            raise ValueError(f"expected pulsar:// or pulsar+ssl://, got {url!r}")
        tls = scheme == "pulsar+ssl"
        default_port = 6651 if tls else 6650
        hosts = []
        for part in rest.rstrip("/").split(","):
            if not part:
                raise ValueError(f"empty host in {url!r}")
            parsed = urlsplit(f"//{part}")
            if not parsed.hostname or parsed.path:
                raise ValueError(f"bad host {part!r} in {url!r}")
            hosts.append((parsed.hostname, parsed.port or default_port))
        return cls(tls, tuple(hosts))

    def url_for(self, host: str, port: int) -> str:
        return f"{'pulsar+ssl' if self.tls else 'pulsar'}://{host}:{port}"

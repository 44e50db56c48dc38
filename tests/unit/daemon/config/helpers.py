"""What the configuration tests share: no flags, no environment, a file to load, a socket path
of a given length."""

from __future__ import annotations

from pathlib import Path

NO_FLAGS: dict[str, object] = {}
NO_ENV: dict[str, str] = {}


def write_toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "pulsar-bruce.toml"
    path.write_text(text)
    return str(path)


def socket_of_length(tmp_path: Path, size: int, suffix: str = ".sock") -> str:
    head = f"{tmp_path}/"
    return head + "s" * (size - len(head) - len(suffix)) + suffix

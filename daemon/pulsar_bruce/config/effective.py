"""The resolved configuration in the config file's own format (``--check-config``).

Every global option, then each ``[topics."..."]`` table under its qualified name with
the values it sets, parsed (sizes in bytes, encryption keys as ``NAME=PATH``), so an
operator sees what each topic gets and the output loads back as a config file.
"""

from __future__ import annotations

import json
from typing import Any

from pulsar_bruce.config.model import OPTIONS, TOPIC_OPTIONS, Config
from pulsar_bruce.config.options import AUTH_TOKEN_ENV
from pulsar_bruce.model.schema import ProducerSchema


def effective_config_toml(config: Config) -> str:
    """The resolved configuration, global values first, then the per-topic tables."""
    lines = []
    for option in OPTIONS:
        value = getattr(config, option.name)
        if value is None and option.name != "metrics_listen":
            lines.append(f"# {option.name}: not set")
            continue
        lines.append(f"{option.name} = {toml_value(option.name, value)}")
    if config.auth_token is not None:
        lines.append(f"# auth token: from {AUTH_TOKEN_ENV} (not shown)")
    if config.topic_overrides:
        lines += [
            "",
            "# Per topic: the table of the topic's full name, else the first glob that",
            "# matches it; what a table leaves out is the global value above.",
        ]
    order = {name: index for index, name in enumerate(TOPIC_OPTIONS)}
    for override in config.topic_overrides:
        lines.append(f"[topics.{json.dumps(override.pattern)}]")
        for name, value in sorted(override.values, key=lambda item: order[item[0]]):
            lines.append(f"{name} = {toml_value(name, value)}")
    return "\n".join(lines) + "\n"


def toml_value(name: str, value: Any) -> str:
    """One option's parsed value as the file would give it."""
    if name == "metrics_listen":
        return '"off"' if value is None else f'"{value[0]}:{value[1]}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if name == "socket_mode":
        return f'"{value:04o}"'
    if isinstance(value, str | ProducerSchema):
        return json.dumps(str(value))
    if isinstance(value, tuple):  # a list option (encryption_keys)
        return json.dumps(list(value))
    return repr(value)

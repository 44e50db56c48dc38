"""What an option is: its name, default, parser and help, and its three spellings.

An option is declared once, as a field of the configuration model
(:mod:`pulsar_bruce.config.model`) made by :func:`option`; the option table is
read back from those fields by :func:`options_of`.  The field's name is the
TOML key; the flag (``--buffer-max-bytes``) and the environment variable
(``PULSAR_BRUCE_BUFFER_MAX_BYTES``) follow from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

ENV_PREFIX = "PULSAR_BRUCE_"
#: The auth token itself (not a path); deliberately neither a flag nor a file key.
AUTH_TOKEN_ENV = ENV_PREFIX + "AUTH_TOKEN"

_METADATA_KEY = "pulsar_bruce.option"


@dataclasses.dataclass(frozen=True, slots=True)
class Option:
    name: str
    #: As a user would write it (``"256MiB"``), shown in ``--help``; ``parse`` turns it into
    #: the field's value.
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


def option(
    default: Any,
    parse: Callable[[Any], Any],
    help: str,
    metavar: str = "VALUE",
    cli_flag: str | None = None,
) -> Any:
    """A model field that is an option; the field's default is ``parse(default)``."""
    spec = Option("", default, parse, help, metavar, cli_flag)  # named by options_of
    return dataclasses.field(default=parse(default), metadata={_METADATA_KEY: spec})


def options_of(model: type[Any]) -> tuple[Option, ...]:
    """The options among ``model``'s fields, in declaration order, each named by its field."""
    return tuple(
        dataclasses.replace(field.metadata[_METADATA_KEY], name=field.name)
        for field in dataclasses.fields(model)
        if _METADATA_KEY in field.metadata
    )

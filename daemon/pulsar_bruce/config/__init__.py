"""Daemon configuration: value parsers, the option model, and the loader.

``values`` parses one kind of value, ``options`` says what an option is,
``model`` declares every option once (as a field of :class:`Config` or
:class:`TopicSettings`) and ``loader`` resolves them from the command line,
the environment and the file.  This package imports only leaf modules
(``pulsar_bruce.model``), never the daemon's runtime parts.
"""

from pulsar_bruce.config.loader import ConfigError, load_config
from pulsar_bruce.config.model import (
    OPTIONS,
    OPTIONS_BY_NAME,
    TOPIC_OPTIONS,
    Config,
    TopicOverride,
    TopicSettings,
    qualify_topic_pattern,
)
from pulsar_bruce.config.options import AUTH_TOKEN_ENV, ENV_PREFIX, Option
from pulsar_bruce.config.values import parse_size

__all__ = [
    "AUTH_TOKEN_ENV",
    "ENV_PREFIX",
    "OPTIONS",
    "OPTIONS_BY_NAME",
    "TOPIC_OPTIONS",
    "Config",
    "ConfigError",
    "Option",
    "TopicOverride",
    "TopicSettings",
    "load_config",
    "parse_size",
    "qualify_topic_pattern",
]

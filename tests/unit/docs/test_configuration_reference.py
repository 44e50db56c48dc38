"""docs/configuration.md's option reference is generated from the option model.

The model (``pulsar_bruce.config.model``) declares every option once, with its
default, metavar and help; the table between the ``options table`` markers of
docs/configuration.md and the list of per-topic keys between the
``per-topic keys`` markers are rendered from it, and a test fails when the file
differs.  Everything outside the markers is written by hand.

Run ``python tests/unit/docs/test_configuration_reference.py --write`` after
adding, renaming or re-documenting an option to regenerate them; without
``--write`` it prints the rendered regions.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from pulsar_bruce.config import OPTIONS, TOPIC_OPTIONS, Option

ROOT = Path(__file__).resolve().parents[3]
CONFIGURATION = ROOT / "docs" / "configuration.md"
WRITE_COMMAND = "python tests/unit/docs/test_configuration_reference.py --write"


def _start(region: str) -> str:
    return f"<!-- {region}: generated from the option model by {WRITE_COMMAND} -->"


def _end(region: str) -> str:
    return f"<!-- end of {region} -->"


def _cell(text: str) -> str:
    """Markdown table cell text: a ``|`` would end the cell."""
    return text.replace("|", "\\|")


def _default(option: Option) -> str:
    value = option.default
    if option.is_switch:
        return "on" if value else "off"
    if value is None or value == "":
        return "none"
    if isinstance(value, float):
        value = f"{value:g}"
    return f"`{value}`"


def _flags(option: Option) -> str:
    if option.is_switch:
        assert option.cli_flag is not None
        return " / ".join(f"`{flag}`" for flag in option.cli_flag.split("/"))
    return f"`{option.flag} {option.metavar}`"


def options_table() -> str:
    """One row per option, in the order of ``pulsar-bruce --help``."""
    rows = [
        "| option | file key | default | per topic | meaning |",
        "|---|---|---|---|---|",
    ]
    for option in OPTIONS:
        per_topic = "yes" if option.name in TOPIC_OPTIONS else ""
        rows.append(
            f"| {_flags(option)} | `{option.name}` | {_default(option)} | {per_topic} "
            f"| {_cell(option.help)} |"
        )
    return "\n".join(rows)


def per_topic_keys() -> str:
    keys = ", ".join(f"`{name}`" for name in TOPIC_OPTIONS)
    return f'Keys allowed in a `[topics."..."]` table: {keys}.'


#: Generated regions of docs/configuration.md, by marker name.
REGIONS: dict[str, Callable[[], str]] = {
    "options table": options_table,
    "per-topic keys": per_topic_keys,
}


def rendered(region: str) -> str:
    return "\n".join([_start(region), "", REGIONS[region](), "", _end(region)])


def current(text: str, region: str) -> str | None:
    start, end = text.find(_start(region)), text.find(_end(region))
    return text[start : end + len(_end(region))] if start >= 0 and end > start else None


def regenerate(text: str) -> str:
    for region in REGIONS:
        found = current(text, region)
        if found is None:
            raise SystemExit(f"{CONFIGURATION} has no {_start(region)} block")
        text = text.replace(found, rendered(region))
    return text


def test_the_option_reference_is_current() -> None:
    text = CONFIGURATION.read_text()
    for region in REGIONS:
        assert current(text, region) == rendered(region), (
            f"docs/configuration.md's {region} is stale: run {WRITE_COMMAND}"
        )


def test_every_option_has_a_row() -> None:
    table = options_table()
    for option in OPTIONS:
        assert f"| `{option.name}` |" in table
    assert len(table.splitlines()) == len(OPTIONS) + 2


def test_a_row_renders_flag_key_default_and_help() -> None:
    rows = {line.split(" | ")[1]: line for line in options_table().splitlines()[2:]}
    assert rows["`buffer_max_bytes`"] == (
        "| `--buffer-max-bytes SIZE` | `buffer_max_bytes` | `256MiB` |  "
        "| memory for messages not yet acknowledged |"
    )
    assert rows["`key_based_batching`"].startswith(
        "| `--key-based-batching` / `--no-key-based-batching` | `key_based_batching` | off | yes |"
    )
    assert "| `batch_max_delay_ms` | `10` | yes |" in rows["`batch_max_delay_ms`"]
    assert "| `spool_dir` | none |" in rows["`spool_dir`"]


def _command_line_flags() -> set[str]:
    from pulsar_bruce.cli import main

    flags = {"--help", "-h"}
    for param in main.params:
        flags.update(param.opts)
        flags.update(param.secondary_opts)
    return flags


def test_every_flag_of_the_command_line_is_documented() -> None:
    """The flags that are not options (``--config``, ``--check-config``, ...) are
    described by hand; none may be missing."""
    text = CONFIGURATION.read_text()
    missing = sorted(flag for flag in _command_line_flags() if f"`{flag}" not in text)
    assert not missing, f"docs/configuration.md does not mention {missing}"


def test_every_flag_the_page_names_exists() -> None:
    """The hand-written notes cannot keep naming an option that was renamed or removed."""
    text = CONFIGURATION.read_text()
    named = set(re.findall(r"`(--[a-z0-9-]+)", text))
    unknown = sorted(named - _command_line_flags())
    assert not unknown, f"docs/configuration.md names flags pulsar-bruce lacks: {unknown}"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        CONFIGURATION.write_text(regenerate(CONFIGURATION.read_text()))
    elif not sys.argv[1:]:
        print("\n\n".join(rendered(region) for region in REGIONS))
    else:
        raise SystemExit(f"usage: {WRITE_COMMAND}")

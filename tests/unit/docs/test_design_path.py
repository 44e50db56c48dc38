"""docs/design.md opens with a message's way, one function per stage: each is where the
table says, so a reader can follow a message with grep alone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DESIGN = ROOT / "docs" / "design.md"
PACKAGE = ROOT / "daemon" / "pulsar_bruce"
STAGES = ["read", "admit", "journal", "batch", "frame", "send", "receipt", "outcome"]


def path_table() -> list[tuple[str, str, str]]:
    """(stage, Class.function, module) rows of the table between the path markers."""
    text = DESIGN.read_text()
    start = text.index("<!-- the path:")
    end = text.index("<!-- end of the path -->")
    rows = []
    for line in text[start:end].splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2].endswith(".py"):
            rows.append((fields[0], fields[1], fields[2]))
    return rows


def test_the_path_names_every_stage_in_order() -> None:
    assert [stage for stage, _, _ in path_table()] == STAGES


def test_each_stage_function_is_defined_where_the_path_says() -> None:
    missing = []
    for stage, function, module in path_table():
        cls, _, name = function.partition(".")
        source = (PACKAGE / module).read_text()
        if not re.search(rf"^class {cls}\b", source, re.M) or not re.search(
            rf"^    (async )?def {name}\(", source, re.M
        ):
            missing.append(f"{stage}: {function} in {module}")
    assert not missing, f"docs/design.md's path names what is not there: {missing}"


def test_the_pipeline_names_the_same_functions() -> None:
    """``pipeline/flow.py``'s docstring has the same table, without the modules."""
    doc = (PACKAGE / "pipeline" / "flow.py").read_text().split('"""')[1]
    rows = []
    for line in doc.splitlines():
        fields = line.split()
        if len(fields) > 1 and fields[0] in STAGES and fields[1].startswith("``"):
            rows.append((fields[0], fields[1].strip("`")))
    assert rows == [(stage, function) for stage, function, _ in path_table()]

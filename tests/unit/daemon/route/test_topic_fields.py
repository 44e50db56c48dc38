"""``Topic``'s fields are written by its own methods only: no other module assigns to them
or changes the lists and sets they hold (the limits are views of ``Topic.state``, written
through their setters)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[4] / "daemon" / "pulsar_bruce"
#: Topic's fields, under the names other modules read them by.
FIELDS = {"producers", "unrouted", "unrouted_batches", "sequenced", "borrowed", "partitioned",
          "name_conflicts", "stats", "state"}  # fmt: skip
MUTATORS = {"append", "extend", "clear", "add", "remove", "discard", "pop", "insert"}


def writes(source: str) -> list[str]:
    """``x.<field> = ...``, ``x.<field> += ...`` and ``x.<field>.append(...)`` (and the
    like) on anything but ``self``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in ast.walk(target)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
        ):
            targets = [node.func.value]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr in FIELDS
                and not (isinstance(target.value, ast.Name) and target.value.id == "self")
                and "topic" in ast.unparse(target.value).lower()
            ):
                found.append(f"{node.lineno}: {ast.unparse(target)}")
    return sorted(found, key=lambda hit: int(hit.split(":")[0]))


def test_no_module_but_topic_py_writes_a_topics_fields() -> None:
    found = {
        path.relative_to(PACKAGE).as_posix(): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "topic.py" and (hits := writes(path.read_text()))
    }
    assert not found, f"call a Topic method instead: {found}"


def test_the_check_sees_what_it_looks_for() -> None:
    assert writes("topic.unrouted.append(m)\nself.topic.name_conflicts += 1\n") == [
        "1: topic.unrouted",
        "2: self.topic.name_conflicts",
    ]
    assert writes("spooled, topic.unrouted_batches = topic.unrouted_batches, []\n") == [
        "1: topic.unrouted_batches"
    ]
    assert writes("self.sequenced = None\nproducer.stats.acked = 1\nt = topic.unrouted\n") == []

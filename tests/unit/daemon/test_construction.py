"""Each stage of the pipeline is built with what it needs: nothing is wired in afterwards.

``server.py``, ``pipeline/`` and the readers' builder hand a part to no other part's
attribute (as ``server.outcomes.journal = self.journal`` once did), and no module
stores a lambda or a ``functools.partial`` on another object (a callable swapped in at
run time), so a reader, or grep, finds every collaborator of a part in its
constructor's call.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2].parent / "daemon" / "pulsar_bruce"
#: Where parts are built: the server, the pipeline, the read stage's ``datagram_reader``.
BUILDERS = [
    PACKAGE / "server.py",
    *sorted((PACKAGE / "pipeline").glob("*.py")),
    PACKAGE / "input" / "socket_reader.py",
]


def attribute_assignments(tree: ast.AST) -> Iterator[tuple[ast.Attribute, ast.expr, int]]:
    """(target, value, line) of every assignment to an attribute."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Attribute):
                yield target, value, node.lineno


def own(target: ast.Attribute) -> bool:
    """``self.name = ...``: the object's own attribute, not one of a part it holds."""
    return isinstance(target.value, ast.Name) and target.value.id == "self"


def is_callable_made_here(value: ast.expr) -> bool:
    return isinstance(value, ast.Lambda) or (
        isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] == "partial"
    )


def is_part(value: ast.expr) -> bool:
    """An object handed over (a name, an attribute, a callable), not a value computed."""
    return isinstance(value, ast.Name | ast.Attribute) or is_callable_made_here(value)


def wired_parts(source: str) -> list[str]:
    return [
        f"{line}: {ast.unparse(target)}"
        for target, value, line in attribute_assignments(ast.parse(source))
        if not own(target) and is_part(value)
    ]


def swapped_callables(source: str) -> list[str]:
    return [
        f"{line}: {ast.unparse(target)}"
        for target, value, line in attribute_assignments(ast.parse(source))
        if not own(target) and is_callable_made_here(value)
    ]


def test_the_builders_wire_nothing_after_construction() -> None:
    found = {
        path.relative_to(PACKAGE).as_posix(): wired
        for path in BUILDERS
        if (wired := wired_parts(path.read_text()))
    }
    assert not found, f"give these to the part's constructor instead: {found}"


def test_no_module_stores_a_callable_on_another_object() -> None:
    found = {
        path.relative_to(PACKAGE).as_posix(): swapped
        for path in sorted(PACKAGE.rglob("*.py"))
        if (swapped := swapped_callables(path.read_text()))
    }
    assert not found, f"give these to the part's constructor instead: {found}"


def test_the_checks_see_what_they_look_for() -> None:
    assert wired_parts("self.outcomes.journal = self.journal\nself.ok = 1\n") == [
        "1: self.outcomes.journal"
    ]
    assert wired_parts("intake.max_message_bytes = min(a, b)\n") == []  # a value, not a part
    assert wired_parts("reader.after_slab = sync\n") == ["1: reader.after_slab"]
    assert swapped_callables("driver.on_closed = lambda d: None\n") == ["1: driver.on_closed"]
    assert swapped_callables("p.into_memory = functools.partial(f, x=1)\n") == ["1: p.into_memory"]
    assert swapped_callables("self.on_closed = on_closed\nbatch.sent_at = now\n") == []

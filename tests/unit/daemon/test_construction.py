"""Each stage of the pipeline is built with what it needs: nothing is wired in afterwards.

``server.py``, ``pipeline/`` and the readers' builder hand a part to no other part's
attribute (as ``server.outcomes.journal = self.journal`` once did), and no module
stores a lambda or a ``functools.partial`` on another object (a callable swapped in at
run time), so a reader, or grep, finds every collaborator of a part in its
constructor's call.  And no constructor is handed a callable (a lambda, a partial, a
bound method) to call back up: the core writes down what happened and the part above
takes it (``Appender.take_batches``, ``TopicRegistry.take_added``); the compiled
admitter's declared call-outs are the exception.  Where the event loop drives an edge
(the socket readers, the stream connections, the metrics server, the token refresh),
the part above is handed over as an object of a declared ``Protocol`` (``ReadStage``,
``StreamStage``, ``Exposition`` and ``StatusSource``, ``TokenSource``), whose methods a
reader finds by name; :data:`NOT_YET` lists the callbacks that remain, each to be turned
the same way.
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


# -- callables handed to constructors -----------------------------------------------------

#: Callbacks still handed down (file: the argument as written); the list only shrinks.  One
#: remains that the check cannot tell from an attribute of the same name elsewhere: the
#: ``self._settled`` a stream connection gives its ``StreamSession`` (a confirmation settled
#: by the outcome stage calls it up, for the flush answers to be written).  One declared
#: hook is an object, not a callable, and so not found here: the drivers' ``SendJournal``,
#: the pipeline's ``JournalCalls`` (``pipeline/journalling.py``) handed to ``batch_stage``
#: as ``self.journal_calls``: a driver frames on timers and receipts, outside any drain, and
#: the journal must hold a batch's ids before its frame is written (``DECLARED_HOOKS``).
NOT_YET: dict[str, set[str]] = {}


#: Objects handed down to be called back (file: the argument as written), each with its
#: reason above: the one declared hook into the journal.
DECLARED_HOOKS = {"pipeline/flow.py": {"self.journal_calls"}}


def test_the_declared_hooks_are_handed_down_where_listed() -> None:
    for name, hooks in DECLARED_HOOKS.items():
        arguments = {
            ast.unparse(value)
            for node in ast.walk(ast.parse((PACKAGE / name).read_text()))
            if isinstance(node, ast.Call)
            for value in [*node.args, *(keyword.value for keyword in node.keywords)]
        }
        assert hooks <= arguments, f"no longer handed down: take them off DECLARED_HOOKS: {name}"


def _method_names() -> set[str]:
    """Names of the package's methods that are nothing else: not a property, and never an
    instance attribute (``ledger.discarded`` is a dict, ``Outcomes.discarded`` a method)."""
    methods: set[str] = set()
    attributes: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        decorators = [ast.unparse(d) for d in item.decorator_list]
                        if any(d.endswith(("property", "setter")) for d in decorators):
                            attributes.add(item.name)
                        else:
                            methods.add(item.name)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        attributes.add(item.target.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                attributes.add(node.attr)
    return methods - attributes


def callables_handed_to_constructors(source: str, methods: set[str]) -> list[str]:
    """Arguments of ``Capitalized(...)`` calls that are lambdas, partials or bound methods
    (an attribute named like one of ``methods``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func).split(".")[-1].lstrip("_")
        if not name[:1].isupper():  # not a constructor (``_Refused`` is one)
            continue
        for value in [*node.args, *(keyword.value for keyword in node.keywords)]:
            if is_callable_made_here(value) or (
                isinstance(value, ast.Attribute) and value.attr in methods
            ):
                found.append(ast.unparse(value))
    return found


def test_no_constructor_is_handed_a_callback() -> None:
    methods = _method_names()
    handed = {
        path.relative_to(PACKAGE).as_posix(): set(
            callables_handed_to_constructors(path.read_text(), methods)
        )
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    new = {name: sorted(found - NOT_YET.get(name, set())) for name, found in handed.items()}
    assert not {name: found for name, found in new.items() if found}, (
        f"return what happened instead, and let the caller act on it: {new}"
    )
    gone = {name: sorted(listed - handed.get(name, set())) for name, listed in NOT_YET.items()}
    assert not {name: listed for name, listed in gone.items() if listed}, (
        f"no longer handed down: take them off NOT_YET: {gone}"
    )


def test_the_callback_check_sees_what_it_looks_for() -> None:
    methods = {"flush_dirty", "topic_added", "_refused"}
    source = (
        "Spooler(store, after=manager.flush_dirty, reachable=lambda: True)\n"
        "TopicRegistry(self.topic_added)\n"
        "SpoolPolicy(refused=functools.partial(outcomes.refused, sample=False))\n"
        "Spooler(store, brokers=pool, writer=manager)\n"
        "Intake(ledger.buffered_bytes)\n"
        "datagram_reader(sock, intake.admit)\n"
        "_Refused(self._refused)\n"
    )
    assert sorted(callables_handed_to_constructors(source, methods)) == [
        "functools.partial(outcomes.refused, sample=False)",
        "lambda: True",
        "manager.flush_dirty",
        "self._refused",
        "self.topic_added",
    ]

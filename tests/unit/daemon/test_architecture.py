"""The daemon's parts import only downwards, and docs/design.md's module map is the real one.

A part is a subpackage of ``pulsar_bruce`` (``route``, ``producer``, ...) or a
top-level module (``server``, ``cli``).  ``LAYERS`` lists them in data-flow
order from the bottom; a module may import from its own part and from parts
listed before it only (within a layer too), so the dependency graph has no
cycle.  Every import counts, including those under ``TYPE_CHECKING`` or inside
functions.

Run ``python tests/unit/daemon/test_architecture.py --write`` after adding or
renaming a module to regenerate the module map in docs/design.md; without
``--write`` it prints the map.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "daemon" / "pulsar_bruce"
DESIGN = ROOT / "docs" / "design.md"

#: Bottom first; within a layer, a part may import the parts before it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "reasons", "native", "model"),  # leaves: names, compiled intake, shared types
    ("config",),  # options and their validation, no runtime module
    ("frame", "parse"),  # Pulsar frames; Bruce datagrams and topic names
    ("batch",),  # batch payloads, compression, encryption
    ("connection",),  # broker connections, lookups, TLS, auth
    ("producer",),  # one producer per partition: batches in flight, receipts
    ("spool",),  # the disk overflow and the memory-or-disk policy
    ("route",),  # intake, topics, routing, outcomes (sans-IO)
    ("topics",),  # topics at the edge: partition lookups, producers, timers (asyncio)
    ("input",),  # the datagram and stream sockets
    ("metrics",),  # Prometheus, /status, the discard log
    ("service",),  # systemd and logging
    ("pipeline",),  # a message's whole way: the stages, built and driven in one object
    ("server", "cli", "__main__"),  # the lifecycle and the command line
)
#: Pairs that the layer order would allow but that must not exist.
FORBIDDEN = {("connection", "config")}

LAYER_OF = {part: index for index, parts in enumerate(LAYERS) for part in parts}
RANK = {part: rank for rank, part in enumerate(part for parts in LAYERS for part in parts)}
ROLES = {
    "__init__": "the version",
    "reasons": "discard reasons",
    "model": "shared data types: ledger, sealed batch, confirmations",
    "native": "the compiled intake (C) and which intake runs",
    "config": "options, parsing, the configuration model",
    "frame": "Pulsar framing and commands",
    "parse": "Bruce datagram parser, topic names",
    "batch": "batch payloads, compression, encryption",
    "connection": "broker connections, lookups, TLS, auth",
    "producer": "per-partition producers and their asyncio drivers",
    "spool": "disk spool and the memory-or-disk policy",
    "route": "the intake, topics, routing and outcomes, sans-IO",
    "topics": "topics at the edge: partition lookups, producers and drivers, timers",
    "input": "datagram and stream sockets",
    "metrics": "Prometheus, /status, discard log",
    "service": "systemd, logging, the shutdown wait",
    "pipeline": "a message's whole way: read, admit, journal, batch, frame, send, receipt, "
    "outcome",
    "server": "the daemon's lifecycle: startup, signals, shutdown",
    "cli": "the command line",
    "__main__": "python -m pulsar_bruce",
}


def part_of(module: str) -> str:
    """``pulsar_bruce.route.intake`` -> ``route``; ``pulsar_bruce`` -> ``__init__``."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else "__init__"


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every ``pulsar_bruce`` name ``path`` imports (relative imports resolved):
    ``from a.b import c`` gives ``a.b.c``, whether ``c`` is a module or a name in one."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return imports_in(tree, module_name(path), path.name == "__init__.py")


def imports_in(tree: ast.AST, here: str, is_package: bool) -> set[str]:
    """:func:`imports_of` for a parsed module ``here`` (``is_package``: an ``__init__.py``)."""
    package = here if is_package else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "pulsar_bruce" or name.startswith("pulsar_bruce.")}


def source_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if not p.name.endswith("_pb2.py"))


def part_edges() -> dict[tuple[str, str], str]:
    """(importing part, imported part) -> one module that shows it."""
    modules = {module_name(path) for path in source_files()}
    edges: dict[tuple[str, str], str] = {}
    for path in source_files():
        source = part_of(module_name(path))
        for target in imports_of(path):
            if target not in modules and target.rpartition(".")[0] in modules:
                target = target.rpartition(".")[0]  # ``from pkg.mod import name``
            imported = part_of(target)
            if imported != source:
                edges.setdefault((source, imported), module_name(path))
    return edges


def test_every_part_has_a_layer() -> None:
    parts = {part_of(module_name(path)) for path in source_files()}
    assert parts <= set(LAYER_OF), f"add to LAYERS: {sorted(parts - set(LAYER_OF))}"


def test_imports_only_point_down() -> None:
    upward = [
        f"{where} ({source}, layer {LAYER_OF[source]}) imports {target} (layer {LAYER_OF[target]})"
        for (source, target), where in sorted(part_edges().items())
        if RANK.get(target, 99) >= RANK.get(source, -1) or (source, target) in FORBIDDEN
    ]
    assert not upward, "imports that point up or sideways:\n" + "\n".join(upward)


#: C API calls that reach into a Python object by name (an attribute or a method).
_BY_NAME = re.compile(
    r"\b(PyObject_(?:Get|Set|Has|Del)Attr\w*|PyObject_CallMethod\w*|_PyObject_GetAttrId)\("
)


def test_the_compiled_intake_reaches_into_no_python_object_by_name() -> None:
    """The C code reads only its own types' structs and calls only the callables it was
    constructed with (``native/_intake.pyi`` declares both): a rename on the Python side
    cannot break the compiled intake at run time, unseen by mypy."""
    found = {
        f"{path.name}:{source[: match.start()].count(chr(10)) + 1}: {match.group(1)}"
        for path in sorted((PACKAGE / "native").glob("*.[ch]"))
        for source in [path.read_text()]
        for match in _BY_NAME.finditer(source)
    }
    assert not found, f"the compiled intake looks names up: {sorted(found)}"
    assert _BY_NAME.search("x = PyObject_GetAttrString(o, \"ready\");")  # the check sees it


# -- the intake is chosen in one place --------------------------------------------------

#: The one module that chooses the intake: it alone reads ``PULSAR_BRUCE_INTAKE`` and
#: imports the extension; every other module asks it (``pick``, ``compiled``).
INTAKE_CHOOSER = "pulsar_bruce.native"
_EXTENSION = "pulsar_bruce.native._intake"
_SWITCH = "PULSAR_BRUCE_INTAKE"


def _docstrings(tree: ast.AST) -> set[int]:
    """The ``id`` of every docstring's node in ``tree``."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def intake_choices(source: str, here: str, is_package: bool = False) -> list[str]:
    """Where ``source`` (the module ``here``) would choose the intake itself: an import of
    the extension, however spelled (``importlib`` and ``getattr`` included), or the switch
    (its name outside a docstring, or ``INTAKE_ENV`` taken from the chooser)."""
    tree = ast.parse(source)
    found = sorted(
        f"imports {name}"
        for name in imports_in(tree, here, is_package)
        if name in (_EXTENSION, f"{INTAKE_CHOOSER}.INTAKE_ENV") or name.startswith(f"{_EXTENSION}.")
    )
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if id(node) in docstrings:
                continue
            if _SWITCH in text or text in ("_intake", _EXTENSION) or text.endswith("._intake"):
                found.append(f"line {node.lineno}: {text!r}")
    return found


def test_the_intake_is_chosen_in_one_place() -> None:
    """Only ``native/__init__.py`` reads ``PULSAR_BRUCE_INTAKE`` and imports the extension;
    every other module asks it, so the two intakes cannot be chosen two ways."""
    elsewhere = {}
    for path in source_files():
        here = module_name(path)
        choices = intake_choices(path.read_text(), here, path.name == "__init__.py")
        if here == INTAKE_CHOOSER:
            assert choices, "the check no longer sees the chooser's own choice"
        elif choices:
            elsewhere[here] = choices
    assert not elsewhere, f"modules that choose the intake themselves (ask native): {elsewhere}"
    # The check sees every way of doing it, and not a docstring that names the switch.
    for source in (
        "from pulsar_bruce.native import _intake\n",
        "from . import _intake\n",
        "import pulsar_bruce.native._intake as extension\n",
        "from pulsar_bruce.native._intake import parse_datagram\n",
        "import importlib\nextension = importlib.import_module('pulsar_bruce.native._intake')\n",
        "import os\nwhich = os.environ.get('PULSAR_BRUCE_INTAKE')\n",
        "import os\nfrom pulsar_bruce.native import INTAKE_ENV\nwhich = os.environ[INTAKE_ENV]\n",
    ):
        assert intake_choices(source, "pulsar_bruce.native.reader"), source
    asking = '"""PULSAR_BRUCE_INTAKE=python: the twin."""\nfrom pulsar_bruce.native import pick\n'
    assert intake_choices(asking, "pulsar_bruce.parse.datagram") == []


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The AST walk finds plain, from-, relative and function-level imports."""
    module = PACKAGE / "producer" / "driver.py"
    assert "pulsar_bruce.connection.pool.ConnectionPool" in imports_of(module)
    fake = tmp_path / "x.py"
    fake.write_text("def f():\n    from pulsar_bruce.route import intake\n")
    tree = ast.parse(fake.read_text())
    names = {
        f"{n.module}.{a.name}"
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }
    assert names == {"pulsar_bruce.route.intake"}


# -- docs/design.md's module map --------------------------------------------------------

_MAP_START = "<!-- module map: generated by tests/unit/daemon/test_architecture.py -->"
_MAP_END = "<!-- end of module map -->"


def _summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = doc.strip().split("\n\n", 1)[0].replace("\n", " ")
    return re.sub(r"\s+", " ", first) or "(no docstring)"


def module_map() -> str:
    """The module map: top layer first, each part with its modules and their summaries."""
    lines: list[str] = []
    by_part: dict[str, list[Path]] = {}
    for path in source_files():
        by_part.setdefault(part_of(module_name(path)), []).append(path)
    for index in range(len(LAYERS) - 1, -1, -1):
        for part in LAYERS[index]:
            modules = by_part.get(part, [])
            # A package's __init__ is listed only where it is the package's one module.
            files = [p for p in modules if p.name != "__init__.py" or len(modules) == 1]
            if files:
                lines.append(f"- **{part}** (layer {index + 1}): {ROLES.get(part, '')}")
                lines += [
                    f"  - `{p.relative_to(PACKAGE).as_posix()}`: {_summary(p)}" for p in files
                ]
    return "\n".join([_MAP_START, "", *lines, "", _MAP_END])


def _documented_map() -> str | None:
    text = DESIGN.read_text()
    start, end = text.find(_MAP_START), text.find(_MAP_END)
    return text[start : end + len(_MAP_END)] if start >= 0 and end > start else None


def test_documented_module_map_is_current() -> None:
    assert _documented_map() == module_map(), (
        "docs/design.md's module map is stale: "
        "run python tests/unit/daemon/test_architecture.py --write"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        current = _documented_map()
        text = DESIGN.read_text()
        if current is None:
            raise SystemExit(f"docs/design.md has no {_MAP_START} block")
        DESIGN.write_text(text.replace(current, module_map()))
    elif not sys.argv[1:]:
        print(module_map())
    else:  # e.g. the old --write-readme: the map moved from README.md to docs/design.md
        raise SystemExit("usage: python tests/unit/daemon/test_architecture.py [--write]")

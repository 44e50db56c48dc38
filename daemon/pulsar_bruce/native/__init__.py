"""Which intake runs: the compiled one (C, ``native/*.c``) when it was built, else pure Python.

This is the one place that chooses: it alone reads ``PULSAR_BRUCE_INTAKE`` and imports
the extension (``_intake``); every other module asks it, through :func:`pick` (the
compiled piece or its pure-Python twin) or :data:`compiled` (the extension, or None).
``test_architecture.py`` fails when another module imports the extension or reads the
switch.

``pip install`` builds the extension where a C compiler is there; without one the
install still succeeds and the daemon runs the pure-Python twins, which behave
identically (the differential tests compare them byte for byte).
``PULSAR_BRUCE_INTAKE=python`` chooses the fallback on purpose (the test suite
runs once each way); ``=compiled`` makes a missing extension an error the
command line reports (:data:`INTAKE_CHOICE_ERROR`).

``_intake.pyi`` is the whole contract between the two sides: mypy checks the Python
side against it, through the types re-exported here for annotations.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar, cast

if TYPE_CHECKING:  # the compiled types, as _intake.pyi declares them
    from pulsar_bruce.native._intake import (
        Admitter as Admitter,
    )
    from pulsar_bruce.native._intake import (
        Entries as Entries,
    )
    from pulsar_bruce.native._intake import (
        PartitionState as PartitionState,
    )
    from pulsar_bruce.native._intake import (
        TagRun as TagRun,
    )
    from pulsar_bruce.native._intake import (
        TopicState as TopicState,
    )

#: The environment switch.
INTAKE_ENV = "PULSAR_BRUCE_INTAKE"

_Twin = TypeVar("_Twin")


def _load(choice: str) -> tuple[ModuleType | None, str, str | None]:
    """(extension or None, what runs in words, why the configuration is wrong or None)."""
    if choice not in ("auto", "compiled", "python"):
        return None, "python", f"{INTAKE_ENV}={choice!r}: use compiled, python or auto"
    if choice == "python":
        return None, f"python ({INTAKE_ENV}=python)", None
    try:
        from pulsar_bruce.native import _intake
    except ImportError as error:
        missing = "python (the compiled intake was not built: no C compiler at install?)"
        if choice == "compiled":
            return None, missing, f"{INTAKE_ENV}=compiled, but it is not there ({error})"
        return None, missing, None
    return _intake, "compiled", None


#: What ``PULSAR_BRUCE_INTAKE`` asks for: ``auto`` (unset), ``compiled``, ``python`` or a mistake.
_CHOICE = os.environ.get(INTAKE_ENV, "auto").strip().lower() or "auto"
#: The extension module, or None when the pure-Python intake runs.
compiled, INTAKE_DESCRIPTION, INTAKE_CHOICE_ERROR = _load(_CHOICE)
#: ``compiled`` or ``python``: what ``--version`` and ``/status`` report.
INTAKE = "compiled" if compiled is not None else "python"
#: Whether the pure-Python intake runs because ``PULSAR_BRUCE_INTAKE=python`` asked for it
#: (not because the extension is missing): the start logs it as information, not a warning.
PYTHON_BY_CHOICE = _CHOICE == "python"


def pick(name: str, twin: _Twin) -> _Twin:
    """The compiled intake's ``name`` where it runs, else ``twin``, its pure-Python twin
    (the same contract: ``tests/unit/daemon/native/`` compares the two)."""
    if compiled is None:
        return twin
    return cast(_Twin, getattr(compiled, name))


def admitter() -> type[Admitter] | None:
    """The compiled admitter's type where the compiled intake runs, else None (the pure-Python
    intake has no admitter: ``Intake.admit_py`` takes every message)."""
    return None if compiled is None else cast("type[Admitter]", compiled.Admitter)

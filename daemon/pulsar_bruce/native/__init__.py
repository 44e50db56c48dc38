"""Which intake runs: the compiled one (C, ``native/*.c``) when it was built, else pure Python.

``pip install`` builds the extension where a C compiler is there; without one the
install still succeeds and the daemon runs the pure-Python twins, which behave
identically (the differential tests compare them byte for byte).
``PULSAR_BRUCE_INTAKE=python`` chooses the fallback on purpose (the test suite
runs once each way); ``=compiled`` makes a missing extension an error the
command line reports (:data:`INTAKE_CHOICE_ERROR`).
"""

from __future__ import annotations

import os
from types import ModuleType

#: The environment switch.
INTAKE_ENV = "PULSAR_BRUCE_INTAKE"


def _load() -> tuple[ModuleType | None, str, str | None]:
    """(extension or None, what runs in words, why the configuration is wrong or None)."""
    choice = os.environ.get(INTAKE_ENV, "auto").strip().lower() or "auto"
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


#: The extension module, or None when the pure-Python intake runs.
compiled, INTAKE_DESCRIPTION, INTAKE_CHOICE_ERROR = _load()
#: ``compiled`` or ``python``: what ``--version`` and ``/status`` report.
INTAKE = "compiled" if compiled is not None else "python"

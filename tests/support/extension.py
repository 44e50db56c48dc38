"""The compiled intake's extension, loaded directly: the native tests compare it with the
pure-Python twins in both passes of ``make test`` (``PULSAR_BRUCE_INTAKE=python`` too)."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest


def load_extension() -> ModuleType | None:
    """``pulsar_bruce.native._intake``, or None where it was not built."""
    try:
        return importlib.import_module("pulsar_bruce.native._intake")
    except ImportError:
        return None


#: Skips a test where the extension was not built.
needs_extension = pytest.mark.skipif(
    load_extension() is None, reason="the compiled intake is not built"
)

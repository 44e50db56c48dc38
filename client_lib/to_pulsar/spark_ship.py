"""Shipping this ``to_pulsar`` package to a Spark session's executors (``addPyFile``).

The package is standard library only on the task side, so a zip of it is all an
executor needs (:mod:`to_pulsar.spark` ships it from ``register()``, ``warm_up()`` and
``write()``). Standard library only: a pyspark ``SparkSession`` is passed in.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import logging
import py_compile
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

__all__ = ["package_zip", "ship"]

log = logging.getLogger("to_pulsar.spark")


@functools.cache
def package_zip() -> Path | None:
    """This ``to_pulsar`` package as a zip (once per process); None if it is not a folder
    (imported from a zip: whoever put it there ships it). Each module goes with its bytecode
    beside it (``x.pyc``, for zipimport; unchecked, as it is made from the ``x.py`` it goes
    with): a Python worker imports it without compiling, where its Python is this version;
    zipimport takes the ``.py`` where the bytecode's magic number is another version's."""
    package = Path(__file__).resolve().parent
    if not package.is_dir():
        return None
    files = [*sorted(package.rglob("*.py")), package / "py.typed"]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    folder = Path(tempfile.mkdtemp(prefix="to_pulsar-ship-"))
    atexit.register(shutil.rmtree, folder, True)
    archive = folder / f"to_pulsar-{digest.hexdigest()[:12]}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in files:
            name = f"to_pulsar/{path.relative_to(package).as_posix()}"
            zipped.write(path, name)
            if path.suffix == ".py":
                compiled = folder / "pyc" / f"{name}c"
                py_compile.compile(
                    str(path),
                    cfile=str(compiled),
                    dfile=name,
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                )
                zipped.write(compiled, f"{name}c")
    return archive


def ship(spark: Any) -> None:
    """Add ``to_pulsar`` (standard library only) to the session's Python files, so executors
    import it without having it installed. Once per SparkContext; :func:`register` calls it."""
    archive = package_zip()
    if archive is None:
        return
    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect sessions have none
        log.warning(
            "to_pulsar: no SparkContext to ship to_pulsar with; the executors need it installed "
            "(or spark.addArtifacts(<to_pulsar zip>, pyfile=True))"
        )
        return
    if archive.name not in (context._python_includes or []):
        context.addPyFile(str(archive))

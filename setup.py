"""The compiled intake, declared here: everything else is in pyproject.toml.

setuptools calls pyproject.toml's ``[tool.setuptools.ext-modules]`` table experimental
and warns about it on every build, so the extension is declared the classic way.
``optional=True``: where no C compiler works the build says so and goes on, and the
daemon runs the pure-Python intake (``pulsar-bruce --version`` says which).
"""

import warnings

from setuptools import Extension, setup

NATIVE = "daemon/pulsar_bruce/native/"

# An editable install (`make run`) of packages under two roots (daemon/, client_lib/) gets
# an import finder, and setuptools says so in a warning that asks nothing of the user.
warnings.filterwarnings("ignore", message="Editable installation")

setup(
    ext_modules=[
        Extension(
            "pulsar_bruce.native._intake",
            sources=[
                NATIVE + name
                for name in (
                    "module.c",
                    "parse.c",
                    "entries.c",
                    "state.c",
                    "admission.c",
                    "admitter.c",
                    "admitter_append.c",
                    "stamp.c",
                    "receiver.c",
                    "receive_thread.c",
                    "journal_io.c",
                )
            ],
            depends=[NATIVE + "intake.h", NATIVE + "admitter.h", NATIVE + "receiver.h"],
            extra_compile_args=["-O2", "-Wall"],
            optional=True,
        )
    ]
)

"""A schema file that cannot be used stops a real daemon at start: one line, exit 2.

No broker is needed: the file is read and checked with the configuration, before the
daemon would talk to one; ``--check-config`` refuses it the same way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.processes import ROOT


def run_daemon(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSAR_BRUCE_")}
    env["PYTHONPATH"] = f"{ROOT / 'daemon'}{os.pathsep}{ROOT / 'client_lib'}"
    return subprocess.run(
        [sys.executable, "-m", "pulsar_bruce", "--service-url", "pulsar://127.0.0.1:9",
         "--metrics-listen", "off", *args],
        capture_output=True, text=True, timeout=30, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_missing_schema_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "orders.json"
    for check in ([], ["--check-config"]):
        result = run_daemon("--socket", str(tmp_path / "b.sock"), "--schema", f"json:{missing}",
                            *check)  # fmt: skip
        assert result.returncode == 2
        assert result.stderr == (
            f"pulsar-bruce: error: --schema: cannot read {missing}: No such file or directory\n"
        )
    assert not (tmp_path / "b.sock").exists()


def test_a_topics_schema_that_is_no_avro_record_is_one_line(tmp_path: Path) -> None:
    schema = tmp_path / "orders.avsc"
    schema.write_text('{"type": "record", "name": "Order", "fields": [{"name": "id"}]}')
    config = tmp_path / "bruce.toml"
    config.write_text(f'[topics."orders"]\nschema = "avro:{schema}"\n')
    result = run_daemon("--socket", str(tmp_path / "b.sock"), "--config", str(config))
    assert result.returncode == 2
    assert result.stderr == (
        f"pulsar-bruce: error: {config}: topics.'orders'.schema: {schema}: not an Avro record "
        'schema: Order.fields[0]: "type" is missing\n'
    )

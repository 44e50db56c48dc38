"""The docs' examples that need a broker, run as written on Apache Pulsar standalone.

Each block is taken from its page (``tests/support/doc_blocks.py``) and run with only
what must differ here replaced: the broker's and the admin API's addresses, file
paths, the daemon's socket.  The pages' order is kept: the admin calls first, then the
daemon and the sending, and the consumer last, subscribed after the message was sent,
as a reader who follows the page does (a consumer that waited for a later message
would hang, so each runs under a deadline).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.apache_pulsar import ApachePulsar
from tests.support.doc_blocks import block, shell_commands, substitute
from tests.support.processes import Daemon, source_env

pytestmark = pytest.mark.apache

BIN = Path(sys.executable).parent
ADMIN = "http://localhost:8080"
#: The official client's log lines (on stdout, as the examples leave its logger as it is).
CLIENT_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ (INFO|WARN|ERROR|DEBUG) ")


def run_shell(
    block_text: str, replacements: dict[str, str], cwd: Path, only: str = ""
) -> list[str]:
    """Each command of a sh block (those starting with ``only``), in ``cwd``; their
    outputs (a command that fails fails the test)."""
    outputs = []
    for command in shell_commands(substitute(block_text, replacements)):
        if not command.startswith(only):
            continue
        done = subprocess.run(
            command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"{command}: {done.stderr}"
        outputs.append(done.stdout)
    return outputs


def admin_calls(apache: ApachePulsar, page: str, namespace: str, cwd: Path) -> None:
    """The page's curl block creating the tenant and ``namespace``; it is there after."""
    text = block(page, "sh", f"/admin/v2/namespaces/{namespace}")
    outputs = run_shell(text, {ADMIN: apache.web_url}, cwd)
    for output in outputs:  # the tenant may be there from the other page's example
        assert output == "" or "already exist" in output, output
    tenant = namespace.split("/")[0]
    assert namespace in apache.admin.get_json(f"/admin/v2/namespaces/{tenant}")


def send(page: str, holding: str, daemon: Daemon, cwd: Path) -> None:
    text = block(page, "sh", holding)
    run_shell(text, {"to_pulsar ": f"{BIN}/to_pulsar --socket-path {daemon.socket_path} "}, cwd)
    counters = daemon.wait_settled(1, timeout=90)
    assert counters.acked == 1, daemon.log()[-2000:]


def run_python(text: str, cwd: Path, epilogue: str = "") -> str:
    """The block as a script (with ``epilogue`` appended); its stdout.  A consumer that
    waits for a message that never comes is a failure, not a hung test."""
    script = cwd / "example.py"
    script.write_text(text + epilogue)
    try:
        done = subprocess.run(
            [sys.executable, str(script)], cwd=cwd, capture_output=True, text=True,
            timeout=60, env=source_env(),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"the example did not finish in 60 s (waiting for a message?):\n{text}")
    assert done.returncode == 0, done.stderr[-2000:]
    return "".join(line for line in done.stdout.splitlines(True) if not CLIENT_LOG.match(line))


def test_schemas_page_example_reads_the_order_typed(
    apache: ApachePulsar, start_daemon, tmp_path: Path
) -> None:
    """docs/schemas.md, Example: namespace, schema file, config, sending, typed consumer."""
    page = "docs/schemas.md"
    admin_calls(apache, page, "acme/shop", tmp_path)
    schema_file = tmp_path / "order.json"
    schema_file.write_text(block(page, "json", '"name": "Order"'))
    json.loads(schema_file.read_text())
    config = tmp_path / "bruce.toml"
    config.write_text(
        substitute(block(page, "toml", "acme/shop/orders"),
                   {"/etc/pulsar-bruce/order.json": str(schema_file)})
    )  # fmt: skip
    daemon = start_daemon(apache.url, "--config", str(config))
    send(page, "--topic acme/shop/orders", daemon, tmp_path)
    consumer = substitute(block(page, "python", "JsonSchema(Order)"),
                          {"pulsar://broker1.example:6650": apache.url})  # fmt: skip
    out = run_python(consumer, tmp_path, "print(type(order).__name__, order.id, order.item)\n")
    assert out == "Order 1 tea\n"


def test_encryption_page_example_reads_the_plaintext_with_the_key(
    apache: ApachePulsar, start_daemon, tmp_path: Path
) -> None:
    """docs/encryption.md: key pairs by OpenSSL, the per-topic keys, the namespace,
    sending, and the consumer with ``CryptoKeyReader``."""
    page = "docs/encryption.md"
    keys = block(page, "sh", "openssl genrsa")
    run_shell(keys, {}, tmp_path)
    run_shell(keys.replace("billing", "audit"), {}, tmp_path)
    config = tmp_path / "bruce.toml"
    config.write_text(
        substitute(block(page, "toml", '[topics."acme/billing/*"]'),
                   {"/etc/pulsar-bruce/keys/": f"{tmp_path}/"})
    )  # fmt: skip
    admin_calls(apache, page, "acme/billing", tmp_path)
    daemon = start_daemon(apache.url, "--config", str(config))
    send(page, "--topic acme/billing/invoices", daemon, tmp_path)
    consumer = substitute(block(page, "python", "CryptoKeyReader"),
                          {"pulsar://localhost:6650": apache.url})  # fmt: skip
    assert run_python(consumer, tmp_path) == "b'invoice 7: 120 EUR'\n"


def test_deploying_page_admin_calls_create_and_configure_a_namespace(
    apache: ApachePulsar, tmp_path: Path
) -> None:
    """docs/deploying.md, Tenants and namespaces: the REST forms as written (on a
    namespace of this test's, so that deduplication is not turned on for others)."""
    page = "docs/deploying.md"
    here = {ADMIN: apache.web_url, "acme/shop": "acme/deploying"}
    create = block(page, "sh", "/admin/v2/namespaces/acme/shop\n")
    *made, listed = run_shell(create, here, tmp_path)
    for output in made:  # the tenant may be there from another test
        assert output == "" or "already exist" in output, output
    assert "acme/deploying" in json.loads(listed)
    run_shell(block(page, "sh", "/deduplication"), here, tmp_path, only="curl")
    policies = apache.admin.get_json("/admin/v2/namespaces/acme/deploying")
    assert policies["deduplicationEnabled"] is True


@pytest.mark.parametrize(
    ("page", "namespace"), [("docs/spark.md", "public/default"), ("docs/delivery.md", "tenant/ns")]
)
def test_deduplication_by_rest_as_the_pages_give_it(
    apache: ApachePulsar, tmp_path: Path, page: str, namespace: str
) -> None:
    """The REST form beside each ``pulsar-admin namespaces set-deduplication``, on a
    namespace of this test's (turning it on for public/default would change other tests)."""
    mine = f"public/dedup-{page.split('/')[1].removesuffix('.md')}"
    apache.admin.create_namespace(mine)
    text = block(page, "sh", "/deduplication")
    run_shell(text, {ADMIN: apache.web_url, f"/namespaces/{namespace}/": f"/namespaces/{mine}/"},
              tmp_path, only="curl")  # fmt: skip
    assert apache.admin.get_json(f"/admin/v2/namespaces/{mine}")["deduplicationEnabled"] is True

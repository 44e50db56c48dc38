"""``--encryption-keys`` / ``encryption_keys`` (per topic too): parsed, read at start, applied.

A key file that cannot be used stops the start with one line naming where it was
given; on SIGHUP the old configuration stays.  Topics get an encryptor through their
producers' policy, and their producers say they encrypt when they register.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from pulsar_bruce.cli import effective_config_toml
from pulsar_bruce.config import ConfigError, load_config
from pulsar_bruce.config.values import parse_encryption_keys
from pulsar_bruce.producer.partition_producer import PartitionProducer
from pulsar_bruce.route.topic import Topic
from pulsar_bruce.route.topic_settings import TopicConfigurator, encryption_recipients

SECRET = "persistent://public/default/secret"


def write_public_key(path: Path, key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return str(path)


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        ("", ()),
        (" ", ()),
        ([], ()),
        ("/etc/keys/app.pem", ("app=/etc/keys/app.pem",)),
        ("ops=/k/ops-2025.pem, /k/b.pub.pem", ("ops=/k/ops-2025.pem", "b.pub=/k/b.pub.pem")),
        (["a=/k/x.pem", "/k/y.pem"], ("a=/k/x.pem", "y=/k/y.pem")),
        ("/k/a=b.pem", ("a=b=/k/a=b.pem",)),  # a "=" inside a path: still a path
    ],
)
def test_values(given: object, parsed: tuple[str, ...]) -> None:
    assert parse_encryption_keys(given) == parsed


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ("a=/k/x.pem,a=/k/y.pem", "key name 'a' is given twice"),
        ("/k/a.pem,/j/a.pem", "key name 'a' is given twice"),
        ("=/k/x.pem", "expected NAME=PATH or PATH, got '=/k/x.pem'"),
        ("app=", "expected NAME=PATH or PATH, got 'app='"),
        ([3], "expected a string, got 3"),
    ],
)
def test_refused_values(given: object, reason: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_encryption_keys(given)
    assert str(refused.value) == reason


def test_an_unreadable_key_is_one_line_naming_the_option(tmp_path: Path) -> None:
    config = load_config({"encryption_keys": str(tmp_path / "gone.pem")}, {})
    with pytest.raises(ConfigError) as refused:
        TopicConfigurator(config)
    assert str(refused.value) == (
        f"--encryption-keys: cannot read {tmp_path / 'gone.pem'}: No such file or directory"
    )


def test_a_topic_with_an_ec_key_is_one_line_naming_the_topic(tmp_path: Path) -> None:
    ec_path = write_public_key(tmp_path / "ec.pem", ec.generate_private_key(ec.SECP384R1()))
    toml = tmp_path / "bruce.toml"
    toml.write_text(f'[topics."secret"]\nencryption_keys = ["{ec_path}"]\n')
    with pytest.raises(ConfigError) as refused:
        encryption_recipients(load_config({}, {}, str(toml)))
    assert str(refused.value).startswith(
        f"topics.{SECRET!r}.encryption_keys: {ec_path} is an EC key: only the Java client"
    )


def test_a_topic_override_encrypts_that_topic_only(tmp_path: Path, rsa_key) -> None:
    path = write_public_key(tmp_path / "app.pem", rsa_key)
    toml = tmp_path / "bruce.toml"
    toml.write_text(f'[topics."secret*"]\nencryption_keys = "ops={path}"\n')
    configurator = TopicConfigurator(load_config({}, {}, str(toml)))
    secret, secret_b, plain = Topic(SECRET), Topic(SECRET + "-b"), Topic("persistent://a/b/c")
    for topic in (secret, secret_b, plain):
        configurator.apply(topic)
    encryptor = configurator.policy(secret).encryptor
    assert encryptor is not None
    assert [(r.name, r.path) for r in encryptor.recipients] == [("ops", path)]
    assert configurator.policy(secret_b).encryptor is encryptor  # equal settings share it
    assert configurator.policy(plain).encryptor is None


def test_sighup_reads_the_keys_again_and_keeps_all_on_a_bad_file(tmp_path: Path, rsa_key) -> None:
    path = write_public_key(tmp_path / "app.pem", rsa_key)
    configurator = TopicConfigurator(load_config({"encryption_keys": path}, {}))
    topic = Topic(SECRET)
    configurator.apply(topic)
    producer = PartitionProducer(topic.name, 0, 1, configurator.policy(topic))
    topic.attach([producer])
    before = producer.policy.encryptor
    assert before is not None
    configurator.reconfigure(load_config({"encryption_keys": path}, {}), [topic])
    assert producer.policy.encryptor not in (None, before)  # read again: a new data key
    kept = producer.policy
    (tmp_path / "app.pem").write_text("gone bad\n")
    with pytest.raises(ConfigError, match="is not a PEM public key or certificate"):
        configurator.reconfigure(load_config({"encryption_keys": path}, {}), [topic])
    assert producer.policy is kept and configurator.policy(topic) is kept
    configurator.reconfigure(load_config({}, {}), [topic])  # SIGHUP without the keys: plain
    assert producer.policy.encryptor is None


def test_the_effective_configuration_lists_the_keys_as_toml(tmp_path: Path, rsa_key) -> None:
    path = write_public_key(tmp_path / "app.pem", rsa_key)
    text = effective_config_toml(load_config({"encryption_keys": f"a={path},b={path}"}, {}))
    assert tomllib.loads(text)["encryption_keys"] == [f"a={path}", f"b={path}"]
    assert "encryption_keys = []" in effective_config_toml(load_config({}, {}))

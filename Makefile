# pulsar-bruce: `make run` and `make test` work on a fresh machine (they create .venv).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check
# Two installs: `make run` needs the package and the broker ([run]); the rest ([test]) only
# what tests and tools need.
RUN_STAMP := $(VENV)/.run-stamp
STAMP     := $(VENV)/.test-stamp

.PHONY: help run broker-stop broker-start test test-models unit lint proto bench bench-senders clean apache-classpath

# A bare `make` lists the targets (the `## target: text` comments below), builds nothing.
.DEFAULT_GOAL := help

## help: this list (what a bare `make` prints)
help:
	@echo "pulsar-bruce: make TARGET"
	@awk '/^## [a-z-]+:/ { sub(/^## /, ""); name = substr($$0, 1, index($$0, ":") - 1); \
	      printf "  %-18s%s\n", name, substr($$0, length(name) + 3); next } \
	     /^## / { sub(/^## /, ""); printf "  %-18s%s\n", "", $$0 }' $(firstword $(MAKEFILE_LIST))

# The compiled intake is built here where a C compiler is; the last line says which intake runs.
$(RUN_STAMP): pyproject.toml setup.py $(wildcard daemon/pulsar_bruce/native/*.[ch])
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) -e '.[run]'
	$(BIN)/pulsar-bruce --version
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP) pyproject.toml
	$(PIP) --upgrade pip
	$(PIP) -e '.[test]'
	touch $(STAMP)

## run: the daemon in the foreground on an embedded pulsar-lite broker (127.0.0.1:6650, ./data);
## `make run PULSAR=apache`: on Apache Pulsar standalone instead (Java 17 and Maven; data in
## ./data/apache-pulsar; the test extras and the broker's classpath are installed first);
## `make run PULSAR=cluster`: on a three-broker Apache Pulsar cluster (6650-6652, new data each time);
## a second copy: `make run BROKER_PORT=6660 METRICS_PORT=9091` (data and sockets in
## ./data-6660, ./run-6660); RUN_ARGS="..." passes other examples/run_local.py options
PULSAR ?= lite
PORT_ARGS = $(if $(BROKER_PORT),--broker-port $(BROKER_PORT)) $(if $(METRICS_PORT),--metrics-port $(METRICS_PORT))
run: $(RUN_STAMP) $(if $(filter apache cluster,$(PULSAR)),apache-classpath)
	$(BIN)/python examples/run_local.py --broker $(PULSAR) $(PORT_ARGS) $(RUN_ARGS)

## broker-stop: stop the broker of a running `make run`, to watch the daemon ride an outage
## out (BROKER_PORT as given to that make run, if any)
broker-stop: $(RUN_STAMP)
	$(BIN)/python examples/run_local.py broker stop $(PORT_ARGS) $(RUN_ARGS)

## broker-start: start that broker again, on its port and data
broker-start: $(RUN_STAMP)
	$(BIN)/python examples/run_local.py broker start $(PORT_ARGS) $(RUN_ARGS)

## test: lint, type-check and the whole suite, real-broker tests included, once per intake
## (the Apache Pulsar interop tests, marked `apache`, run in the first pass only); each pass
## ends with its slowest tests and its time
DURATIONS := --durations=25 --durations-min=5
test: $(STAMP) lint apache-classpath
	$(BIN)/python -m pytest -q -p no:cacheprovider $(DURATIONS)
	PULSAR_BRUCE_INTAKE=python $(BIN)/python -m pytest -q -p no:cacheprovider -m "not apache and not bench" $(DURATIONS)

## apache-classpath: resolve Apache Pulsar's classpath with Maven (once; cached in ~/.cache)
apache-classpath: $(STAMP)
	$(BIN)/python -m tests.support.apache_pulsar classpath

## test-models: the "nothing lost" state machines (the producer's lifecycle against a broker
## that fails like BookKeeper, the ledger, the intake's identity), MODEL_EXAMPLES random examples
## each (default 20000; about 15 minutes) instead of make test's short derandomized runs: a
## failure prints its example and its @reproduce_failure blob (no per-test timeout; the rig's
## log lines are not shown)
MODEL_EXAMPLES ?= 20000
MODEL_TESTS := tests/unit/daemon/producer/test_id_machine.py::TestProducerIds \
	tests/unit/daemon/model/test_ledger.py::TestLedgerTransitions \
	tests/unit/daemon/route/test_intake_identity.py::TestIdentityHoldsAfterEveryStep
test-models: $(STAMP)
	PULSAR_BRUCE_MODEL_EXAMPLES=$(MODEL_EXAMPLES) $(BIN)/python -m pytest -q -p no:cacheprovider \
		--timeout=0 --show-capture=no $(MODEL_TESTS)

## unit: the unit tests only (tests/unit: no broker)
unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

## lint: ruff and mypy (strict)
lint: $(STAMP)
	$(BIN)/ruff check daemon client_lib tests examples $(wildcard bench)
	$(BIN)/mypy daemon/pulsar_bruce client_lib/to_pulsar

## bench: throughput, CPU, latency and memory vs the official client (a few minutes; see bench/);
## BROKER=lite (default), apache (Apache Pulsar standalone: Java 17 and Maven), both, or cluster
## (a three-broker Apache Pulsar cluster; ratios against the official client on the same cluster);
## many processes sending at moderate rates: `make bench-senders` (below)
BROKER ?= lite
bench: $(STAMP) $(if $(filter lite,$(BROKER)),,apache-classpath)
	$(BIN)/python -m bench.throughput --broker $(BROKER) $(BENCH_ARGS)

## bench-senders: many senders at moderate rates (16 and 64 processes, 200 B and 1 KB JSON-like
## values, 16,000 msg/s in all): the official client in each process vs to_pulsar.Sender -> one
## daemon; CPU of senders, daemon and broker, entries, RSS, latency (about 6 minutes; on Apache
## Pulsar standalone unless BROKER=lite; BENCH_ARGS="--seconds 5 --senders 16" passes options)
bench-senders: BROKER = apache
bench-senders: $(STAMP)
	$(if $(filter lite,$(BROKER)),,$(MAKE) apache-classpath)
	$(BIN)/python -m bench.many_senders --broker $(BROKER) $(BENCH_ARGS)

## proto: regenerate daemon/pulsar_bruce/frame/pulsar_api_pb2.py(i) from proto/
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto \
	    --python_out=daemon/pulsar_bruce/frame --pyi_out=daemon/pulsar_bruce/frame \
	    proto/pulsar_api.proto

## clean: remove .venv, ./data and ./run (and a second copy's ./data-PORT, ./run-PORT)
clean:
	rm -rf $(VENV) data run data-[0-9]* run-[0-9]*

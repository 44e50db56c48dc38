#!/usr/bin/env bash
# The host-scaling bench (bench/hostscale.py) on a machine with no package registry.
#
#   bash bench/device_run.sh [hostscale options...]     # as root, from anywhere
#
# Needs Python 3.12 (python3.12, else a python3 that is 3.12; or PYTHON=/path) and the
# wheels in build/wheels, fetched beforehand where a registry is reachable:
#
#   pip download --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d build/wheels \
#       pulsar-client pulsar-lite==0.2.0 uvloop protobuf crc32c lz4 cramjam click \
#       prometheus-client setuptools wheel pip
#
# Makes a venv (build/venv-device), installs the project offline (editable, no build
# isolation, with the [run] extra: pulsar-lite and pulsar-client), raises
# net.unix.max_dgram_qlen to 512 for the run (the bench restores it), and runs
#   python -m bench.hostscale --senders 1,2,4,8,12 --messages 300000 --rounds 3 --partitions 8
# Options given here are appended, so they override those (e.g. --senders 12).
# Writes to $OUT (default ./out): setup.log, hostscale.txt, hostscale.json (rewritten
# after each K, so a cut-short run keeps what it measured) and logs.tar.gz (daemon,
# broker and worker logs; the broker's data stays in $WORKDIR, by default a new
# /tmp/hostscale-*). Exits with the bench's status (1: something was lost, 2: failed).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-./out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WHEELS=$ROOT/build/wheels
VENV=${VENV:-$ROOT/build/venv-device}
WORKDIR=${WORKDIR:-$(mktemp -d /tmp/hostscale-XXXXXX)}
SETUP_LOG=$OUT/setup.log
# Only build/wheels: no pip configuration of the machine's adds other sources.
export PIP_CONFIG_FILE=/dev/null
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_NO_INDEX

log() { echo "device_run: $*" | tee -a "$SETUP_LOG"; }

pick_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3.12 python3; do
        [ -n "$candidate" ] || continue
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

: >"$SETUP_LOG"
ls "$WHEELS"/*.whl >/dev/null 2>&1 || { log "no wheels in $WHEELS (see the top of $0)"; exit 2; }
PY=$(pick_python) || { log "no Python 3.12 found (set PYTHON=/path/to/python3.12)"; exit 2; }
log "python: $PY ($("$PY" -VV | tr '\n' ' '))"
log "machine: $(nproc) cores, kernel $(uname -r), $(grep MemTotal /proc/meminfo)"

if [ ! -x "$VENV/bin/python" ]; then
    # A Python without ensurepip (Debian's python3.12 without python3.12-venv) still
    # makes a venv without pip; pip then installs itself from its wheel.
    if ! "$PY" -m venv "$VENV" >>"$SETUP_LOG" 2>&1; then
        log "venv with pip failed; making one without and installing pip from its wheel"
        rm -rf "$VENV"
        "$PY" -m venv --without-pip "$VENV" >>"$SETUP_LOG" 2>&1
        pip_wheel=$(ls "$WHEELS"/pip-*.whl | head -n 1)
        "$VENV/bin/python" "$pip_wheel/pip" install --quiet --no-index \
            --find-links "$WHEELS" pip >>"$SETUP_LOG" 2>&1
    fi
fi
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check --no-index --find-links "$WHEELS")
# --no-build-isolation: the build uses this venv's setuptools (so it must be there first).
"${PIP[@]}" --upgrade pip setuptools wheel >>"$SETUP_LOG" 2>&1
"${PIP[@]}" --no-build-isolation -e ".[run]" >>"$SETUP_LOG" 2>&1 \
    || { log "install failed:"; tail -n 30 "$SETUP_LOG"; exit 2; }
"$VENV/bin/python" -c 'import pulsar, pulsar_lite, uvloop, lz4, cramjam, crc32c, to_pulsar, pulsar_bruce' \
    || { log "imports failed after the install"; exit 2; }
"$VENV/bin/python" -m pip list --disable-pip-version-check >>"$SETUP_LOG" 2>&1
log "installed into $VENV"

set +e
PYTHONUNBUFFERED=1 "$VENV/bin/python" -m bench.hostscale \
    --senders 1,2,4,8,12 --messages 300000 --rounds 3 --partitions 8 \
    --set-qlen 512 --json "$OUT/hostscale.json" --workdir "$WORKDIR" "$@" 2>&1 \
    | tee "$OUT/hostscale.txt"
rc=${PIPESTATUS[0]}
set -e
# The logs, not the brokers' data.
tar -czf "$OUT/logs.tar.gz" -C "$WORKDIR" --exclude='data' --exclude='data.rocksdb' --exclude='src' . 2>/dev/null || true
log "bench exited $rc; output in $OUT"
exit "$rc"

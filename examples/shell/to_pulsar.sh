# shellcheck shell=bash
# Shell helpers over the `to_pulsar` CLI. Source it, then send:
#
#     . examples/shell/to_pulsar.sh
#     export TO_PULSAR_SOCKET=/run/pulsar-bruce/bruce.sock   # optional: the CLI's default
#     to_pulsar_send clicks '{"user":42}' user-42
#     df -h | to_pulsar_send_stdin disk-usage "$(hostname)"
#
# $TO_PULSAR_SOCKET is read by the CLI itself. $TO_PULSAR_CLI names the command to
# run (split on whitespace, e.g. "python3 -m to_pulsar.cli"); unset, it is `to_pulsar`
# from PATH, else this checkout's .venv/bin/to_pulsar (where `make run` installs it).
# Both functions return the CLI's exit status: 0 sent, 1 send failed, 2 bad arguments;
# 127 (and one line) if there is no CLI to run.

# This checkout's virtualenv CLI, found from this file's path (builtins only).
_to_pulsar_here="${BASH_SOURCE[0]:-.}"
case "$_to_pulsar_here" in
    */*) _to_pulsar_here="${_to_pulsar_here%/*}" ;;
    *) _to_pulsar_here=. ;;
esac
_to_pulsar_venv_cli="$(cd "$_to_pulsar_here/../.." 2>/dev/null && pwd)/.venv/bin/to_pulsar"
unset _to_pulsar_here

# _to_pulsar_cli FUNCTION: the command to run, into the caller's array _to_pulsar_cmd.
_to_pulsar_cli() {
    if [ -n "${TO_PULSAR_CLI:-}" ]; then
        read -r -a _to_pulsar_cmd <<< "$TO_PULSAR_CLI"
    elif command -v to_pulsar > /dev/null 2>&1; then
        _to_pulsar_cmd=(to_pulsar)
    elif [ -x "$_to_pulsar_venv_cli" ]; then
        _to_pulsar_cmd=("$_to_pulsar_venv_cli")
    else
        echo "$1: no to_pulsar command: not on PATH nor at $_to_pulsar_venv_cli" \
            "(make run installs it there); add its directory to PATH or set TO_PULSAR_CLI" >&2
        return 127
    fi
}

# to_pulsar_send TOPIC VALUE [KEY]: one AnyPartition message, event time now.
to_pulsar_send() {
    if [ "$#" -lt 2 ] || [ "$#" -gt 3 ]; then
        echo "usage: to_pulsar_send TOPIC VALUE [KEY]" >&2
        return 2
    fi
    local -a _to_pulsar_cmd
    _to_pulsar_cli to_pulsar_send || return
    # --opt=VALUE so that values starting with "-" are not taken for options.
    "${_to_pulsar_cmd[@]}" "--topic=$1" "--value=$2" ${3:+"--key=$3"}
}

# to_pulsar_send_stdin TOPIC [KEY]: stdin, byte for byte, as one message.
to_pulsar_send_stdin() {
    if [ "$#" -lt 1 ] || [ "$#" -gt 2 ]; then
        echo "usage: to_pulsar_send_stdin TOPIC [KEY] < VALUE" >&2
        return 2
    fi
    local -a _to_pulsar_cmd
    _to_pulsar_cli to_pulsar_send_stdin || return
    "${_to_pulsar_cmd[@]}" "--topic=$1" --stdin ${2:+"--key=$2"}
}

# shellcheck shell=bash
# Shell helpers over the `to_pulsar` CLI. Source it, then send:
#
#     . examples/shell/to_pulsar.sh
#     export TO_PULSAR_SOCKET=/run/pulsar-bruce/bruce.sock   # optional: the CLI's default
#     to_pulsar_send clicks '{"user":42}' user-42
#     df -h | to_pulsar_send_stdin disk-usage "$(hostname)"
#
# $TO_PULSAR_SOCKET is read by the CLI itself. $TO_PULSAR_CLI names the command to
# run (default `to_pulsar`; split on whitespace, e.g. "python3 -m to_pulsar.cli").
# Both functions return the CLI's exit status: 0 sent, 1 send failed, 2 bad arguments.

# to_pulsar_send TOPIC VALUE [KEY]: one AnyPartition message, event time now.
to_pulsar_send() {
    if [ "$#" -lt 2 ] || [ "$#" -gt 3 ]; then
        echo "usage: to_pulsar_send TOPIC VALUE [KEY]" >&2
        return 2
    fi
    local -a cli
    read -r -a cli <<< "${TO_PULSAR_CLI:-to_pulsar}"
    # --opt=VALUE so that values starting with "-" are not taken for options.
    "${cli[@]}" "--topic=$1" "--value=$2" ${3:+"--key=$3"}
}

# to_pulsar_send_stdin TOPIC [KEY]: stdin, byte for byte, as one message.
to_pulsar_send_stdin() {
    if [ "$#" -lt 1 ] || [ "$#" -gt 2 ]; then
        echo "usage: to_pulsar_send_stdin TOPIC [KEY] < VALUE" >&2
        return 2
    fi
    local -a cli
    read -r -a cli <<< "${TO_PULSAR_CLI:-to_pulsar}"
    "${cli[@]}" "--topic=$1" --stdin ${2:+"--key=$2"}
}

"""Per-call cost of the C, Perl and shell senders against each language's bare send:
``python -m bench.send_cost_langs``.

As ``send_cost.py`` does for Python: each sender writes 100 B AnyPartition messages into
a UNIX datagram socket that a separate process drains, no daemon. For C and Perl, one
process times N calls of the example library's send (``to_pulsar_send_any``,
``ToPulsar->send_any``: encoding, the clock, the system call) and N bare sends of the
same datagram built once (the floor: the system call alone), as user + system CPU
(``getrusage``; Perl's ``times`` counts 10 ms ticks, so it runs 5 N), best of
``--repeat``. The shell sender (``to_pulsar_send`` in ``examples/shell/to_pulsar.sh``)
runs the ``to_pulsar`` command once a message, so its row is wall time per message
against starting ``true`` from the same shell: a process start is its floor. A row
is skipped where its tool (gcc, perl) is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.send_cost import _drain

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

_C_BENCH = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include "to_pulsar.h"

static double cpu_us(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec * 1e6 + u.ru_utime.tv_usec + u.ru_stime.tv_sec * 1e6 +
           u.ru_stime.tv_usec;
}

int main(int argc, char **argv) {
    long n = atol(argv[2]);
    int repeat = atoi(argv[3]);
    struct to_pulsar tp;
    char value[100], datagram[256];
    memset(value, 'v', sizeof value);
    if (to_pulsar_open(&tp, argv[1]) < 0 || to_pulsar_set_timeout_ms(&tp, -1) < 0) return 2;
    long size = to_pulsar_encode_any(datagram, sizeof datagram, "bench-topic", 11, NULL, 0,
                                     value, sizeof value, to_pulsar_now_ms());
    double best_lib = 1e18, best_bare = 1e18;
    for (int r = 0; r < repeat; r++) {
        double t0 = cpu_us();
        for (long i = 0; i < n; i++)
            if (to_pulsar_send_any(&tp, "bench-topic", NULL, 0, value, sizeof value,
                                   to_pulsar_now_ms()) < 0) return 3;
        double t1 = cpu_us();
        for (long i = 0; i < n; i++)
            if (send(tp.fd, datagram, (size_t)size, 0) < 0) return 4;
        double t2 = cpu_us();
        if (t1 - t0 < best_lib) best_lib = t1 - t0;
        if (t2 - t1 < best_bare) best_bare = t2 - t1;
    }
    printf("%f %f\n", best_lib / n, best_bare / n);
    return 0;
}
"""

_PERL_BENCH = r"""
use strict; use warnings; use Socket; use ToPulsar;
my ($path, $n, $repeat) = @ARGV;
my $tp = ToPulsar->new($path, timeout => undef);
my $value = 'v' x 100;
my $datagram = ToPulsar::encode_any_partition('bench-topic', $value, '', 1);
my $sock = $tp->{sock};
my ($best_lib, $best_bare) = (1e18, 1e18);
for (1 .. $repeat) {
    my @t0 = times;
    $tp->send_any('bench-topic', $value) for 1 .. $n;
    my @t1 = times;
    send($sock, $datagram, 0) for 1 .. $n;
    my @t2 = times;
    my $lib = ($t1[0] + $t1[1] - $t0[0] - $t0[1]) * 1e6 / $n;
    my $bare = ($t2[0] + $t2[1] - $t1[0] - $t1[1]) * 1e6 / $n;
    $best_lib = $lib if $lib < $best_lib;
    $best_bare = $bare if $bare < $best_bare;
}
printf "%f %f\n", $best_lib, $best_bare;
"""

_SHELL_BENCH = r"""
. "$1/shell/to_pulsar.sh"
export TO_PULSAR_SOCKET="$2"
n=$3
start=$(date +%s%N)
for ((i = 0; i < n; i++)); do to_pulsar_send bench-topic vvvvvvvvvv || exit 3; done
mid=$(date +%s%N)
for ((i = 0; i < n; i++)); do /bin/true; done
end=$(date +%s%N)
echo "$(( (mid - start) / n / 1000 )) $(( (end - mid) / n / 1000 ))"
"""


def _run(argv: list[str], **kwargs: object) -> list[float]:
    out = subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    return [float(x) for x in out.stdout.split()]


def measure(n: int, repeat: int, shell_n: int) -> dict[str, tuple[float, float] | None]:
    results: dict[str, tuple[float, float] | None] = {}
    with tempfile.TemporaryDirectory(prefix="scl") as tmp:
        path = os.path.join(tmp, "d.sock")
        drain = _drain(path, "dgram")
        try:
            gcc = shutil.which("gcc") or shutil.which("cc")
            if gcc:
                source = Path(tmp, "bench.c")
                source.write_text(_C_BENCH)
                binary = Path(tmp, "bench")
                subprocess.run(
                    [gcc, "-O2", "-I", str(EXAMPLES / "c"), str(source),
                     str(EXAMPLES / "c" / "to_pulsar.c"), str(EXAMPLES / "c" / "to_pulsar_topic.c"),
                     "-o", str(binary)],
                    check=True,
                )  # fmt: skip
                lib, bare = _run([str(binary), path, str(n), str(repeat)])
                results["C to_pulsar_send_any"] = (lib, bare)
            else:
                results["C to_pulsar_send_any"] = None
            if shutil.which("perl"):
                lib, bare = _run(
                    ["perl", "-I", str(EXAMPLES / "perl"), "-e", _PERL_BENCH, path,
                     str(n * 5), str(repeat)],
                )  # fmt: skip
                results["Perl ToPulsar->send_any"] = (lib, bare)
            else:
                results["Perl ToPulsar->send_any"] = None
            env = {**os.environ, "TO_PULSAR_CLI": f"{sys.executable} -m to_pulsar.cli"}
            lib, bare = _run(
                ["bash", "-c", _SHELL_BENCH, "bench", str(EXAMPLES), path, str(shell_n)], env=env
            )
            results["shell to_pulsar_send (wall)"] = (lib, bare)
        finally:
            drain.kill()
            drain.wait()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--shell-messages", type=int, default=20)
    args = parser.parse_args(argv)
    print(f"100 B values; C and Perl: best of {args.repeat}, CPU (user + system) per call")
    for name, row in measure(args.messages, args.repeat, args.shell_messages).items():
        if row is None:
            print(f"  {name:30} skipped (tool missing)")
            continue
        lib, bare = row
        print(f"  {name:30} {lib:9.2f} us/message   bare send {bare:9.2f}   {lib / bare:5.2f}x")
    print(f"  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

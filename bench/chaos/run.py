"""Chaos, long form (issue 4, point 2): prints a report, exits 1 if any scenario lost a message
or broke another expectation.

    .venv/bin/python -m bench.chaos.run                      # every scenario, long form
    .venv/bin/python -m bench.chaos.run restarts outage      # some of them
    .venv/bin/python -m bench.chaos.run --messages 20000 --outage-s 5 --silent-connections 3

Scenarios (``bench/chaos/scenarios.py`` and ``silent_scenario.py``;
``tests/integration/test_chaos.py`` is the short form):

- ``restarts``: the broker SIGKILLed and restarted (same port, same data dir) ``--restarts``
  times during a stream of ``--messages`` at ``--rate``/s: 0 lost, no discards, duplicates
  read back <= ``possible_duplicates``;
- ``outage``: the broker down ``--outage-s`` at a steady ``--outage-rate``/s with a
  ``--buffer-max-bytes`` too small for it (no spool): acked + buffer_full == sent exactly,
  and exactly the acked values read back;
- ``outage-spool``: the same outage with ``--spool-dir``: nothing discarded, all acked;
- ``sigterm``: the daemon SIGTERMed ``--sigterm-rounds`` times, each after
  ``--sigterm-after`` messages of a flat-out sender: exit 0, everything sent received and
  acked, none discarded as shutdown;
- ``silent``: a broker that accepts the TCP connection and never answers: handshake
  timeouts, reconnects with backoff, RSS bounded while datagrams keep arriving beyond
  ``--silent-buffer`` (2 MiB), until ``--silent-connections`` attempts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.chaos.lab import Lab
from bench.chaos.tools import Outcome

SCENARIOS = ("restarts", "outage", "outage-spool", "sigterm", "silent")


def parse_size(text: str) -> int:
    units = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "B": 1}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=", ".join(SCENARIOS))
    parser.add_argument("--messages", type=int, default=100_000, help="restarts: stream length")
    parser.add_argument("--rate", type=float, default=10_000, help="restarts: messages/s")
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--down-s", type=float, default=1.0, help="restarts: each outage")
    parser.add_argument("--outage-s", type=float, default=20.0)
    parser.add_argument("--outage-rate", type=float, default=2_000)
    parser.add_argument("--buffer-max-bytes", type=parse_size, default=parse_size("1MiB"))
    parser.add_argument("--sigterm-after", type=int, default=100_000)
    parser.add_argument("--sigterm-rounds", type=int, default=5)
    parser.add_argument("--silent-connections", type=int, default=5)
    parser.add_argument("--silent-buffer", type=parse_size, default=parse_size("2MiB"))
    parser.add_argument("--timeout", type=float, default=120.0, help="per wait, seconds")
    parser.add_argument("--workdir", help="keep brokers' and daemons' files here")
    parser.add_argument("--no-snapshot", action="store_true", help="run the live working tree")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    chosen = args.scenarios or list(SCENARIOS)
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")

    outcomes: list[Outcome] = []
    started = time.monotonic()
    with Lab(args.workdir, snapshot=not args.no_snapshot) as lab:
        from bench.chaos import scenarios, silent_scenario

        print(lab.code, flush=True)
        plan: list[Callable[[], Outcome]] = []
        for name in chosen:
            if name == "restarts":
                plan.append(
                    lambda: scenarios.broker_restarts(
                        lab.broker(),
                        lab.start_daemon,
                        messages=args.messages,
                        rate=args.rate,
                        restarts=args.restarts,
                        down_s=args.down_s,
                        timeout=args.timeout,
                    )
                )
            elif name in ("outage", "outage-spool"):
                plan.append(
                    lambda name=name: scenarios.broker_outage(  # type: ignore[misc]
                        lab.broker(),
                        lab.start_daemon,
                        messages=int(args.outage_rate * args.outage_s * 2),
                        rate=args.outage_rate,
                        down_s=args.outage_s,
                        kill_at=0.25,
                        buffer_max_bytes=args.buffer_max_bytes,
                        timeout=args.timeout,
                        spool_dir=lab.spool_dir() if name == "outage-spool" else None,
                    )
                )
            elif name == "sigterm":
                plan += [
                    lambda: scenarios.daemon_sigterm(
                        lab.broker(),
                        lab.start_daemon,
                        after=args.sigterm_after,
                        timeout=args.timeout,
                    )
                ] * args.sigterm_rounds
            else:
                plan.append(
                    lambda: silent_scenario.silent_broker(
                        lab.start_daemon,
                        buffer_max_bytes=args.silent_buffer,
                        connections=args.silent_connections,
                        overflow=20.0,
                        timeout=args.timeout,
                    )
                )
        for run in plan:
            t0 = time.monotonic()
            outcome = run()
            outcome.figures["scenario time"] = f"{time.monotonic() - t0:.1f} s"
            print(outcome.report(), flush=True)
            outcomes.append(outcome)
            lab.cleanup()

    failed = [o for o in outcomes if not o.ok]
    print(
        f"\n{len(outcomes) - len(failed)} of {len(outcomes)} scenario runs ok "
        f"in {time.monotonic() - started:.0f} s"
        + ("" if not failed else ": FAILED " + "; ".join(o.name for o in failed))
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {"name": o.name, "ok": o.ok, "figures": o.figures, "problems": o.problems}
                    for o in outcomes
                ],
                indent=2,
                default=str,
            )
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

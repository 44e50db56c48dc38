"""Fuzz, long form (issue 4, point 5): mutated datagrams interleaved with valid ones at a running
daemon on a real pulsar-lite broker; prints a report, exits 1 if anything was lost or miscounted.

    .venv/bin/python -m bench.fuzz.run                        # 100,000 mutants, seed 1
    .venv/bin/python -m bench.fuzz.run --mutants 20000 --seed 7 --rounds 3

Each mutant (bit flips, byte overwrites, truncations, extensions, random header fields,
random bytes, empty and oversized datagrams) follows a valid message; every datagram is
classified with the daemon's own parser and topic check beforehand (``fuzz/datagrams.py``).
Checked (``fuzz/campaign.py``): the daemon stays up and logs no traceback; received ==
sent; every discard reason counts exactly the datagrams classified with it; acked == the
valid ones, per topic (valid mutants included); buffered == 0; the accounting identity;
the base topic reads back exactly the valid values.
``tests/integration/test_fuzz_smoke.py`` is the short form (5,000 mutants).
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.chaos.lab import Lab


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mutants", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1, help="first seed; +1 per round")
    parser.add_argument("--rounds", type=int, default=1, help="campaigns, each on a new daemon")
    parser.add_argument("--max-message-bytes", type=int, default=4096)
    parser.add_argument("--max-extra-topics", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--workdir", help="keep the broker's and daemons' files here")
    parser.add_argument("--no-snapshot", action="store_true", help="run the live working tree")
    args = parser.parse_args()

    started = time.monotonic()
    failed = 0
    with Lab(args.workdir, snapshot=not args.no_snapshot) as lab:
        from bench.fuzz.campaign import fuzz

        print(lab.code, flush=True)
        broker = lab.broker()
        for round_ in range(args.rounds):
            outcome = fuzz(
                lab.start_daemon,
                broker.url,
                mutants=args.mutants,
                seed=args.seed + round_,
                max_message_bytes=args.max_message_bytes,
                max_extra_topics=args.max_extra_topics,
                timeout=args.timeout,
            )
            print(outcome.report(), flush=True)
            failed += not outcome.ok
    print(
        f"\n{args.rounds - failed} of {args.rounds} fuzz runs ok "
        f"in {time.monotonic() - started:.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

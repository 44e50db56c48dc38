"""``python -m pulsar_bruce``: the same as the ``pulsar-bruce`` command."""

from pulsar_bruce.cli import main

main()

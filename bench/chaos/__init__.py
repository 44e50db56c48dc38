"""Chaos scenarios for pulsar-bruce (issue 4, point 2): real brokers, real daemons, real faults.

``run.py`` is the long form; ``tests/integration/test_chaos.py`` runs the same
scenarios (:mod:`chaos.scenarios`) in a short form.
"""

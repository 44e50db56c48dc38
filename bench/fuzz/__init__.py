"""Fuzzing a running pulsar-bruce daemon with mutated Bruce datagrams (issue 4, point 5).

``run.py`` is the long form; ``tests/integration/test_fuzz_smoke.py`` runs the same
campaign (:mod:`fuzz.campaign`) in a short form.
"""

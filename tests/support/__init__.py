"""Helpers shared by the tests and bench/: processes, fake brokers, senders."""

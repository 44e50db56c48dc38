"""A message's whole way through the daemon, as one object (``flow.Pipeline``)."""

"""The optional disk spool: where messages go when memory or the broker cannot take them."""

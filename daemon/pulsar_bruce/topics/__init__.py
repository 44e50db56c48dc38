"""Topics at the edge, with asyncio: partition lookups, producers and their drivers,
rate-limit timers.  The sans-IO admission and routing they serve is ``route/``."""

"""The asyncio shell around the pure core: sockets, timers, launchers."""

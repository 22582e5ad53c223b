"""The seed experiment, runnable by anyone: seeded job batches, real grids through the
daemon, the same batches in the simulator, and reports of either."""

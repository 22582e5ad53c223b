"""Command-line tools: elasticd, esubmit, equeue, ecancel."""

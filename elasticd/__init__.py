"""elastic's daemon, its scheduling core and policies, and the command-line tools."""

__version__ = "0.1.0"

"""`elasticd replay STATE_DIR`: feed a real run's event log through the core again and check
that every decision comes out the same."""

from __future__ import annotations

import argparse
from pathlib import Path

from elasticd.eventlog import LOG_FILE


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    r = sub.add_parser(
        "replay", help="replay a run's event log through the core and check every decision",
        description="Feed every event a daemon recorded in STATE_DIR/events.jsonl to a fresh core with the "
        "same nodes, policy and settings, and compare each action list with the recorded one. Exit 0 when "
        "every decision is reproduced, 1 at the first that differs (named with its log line).")
    r.add_argument("state_dir", type=Path, metavar="STATE_DIR",
                   help=f"a daemon's state directory (or its {LOG_FILE})")
    r.set_defaults(func=run_replay)


def run_replay(args: argparse.Namespace) -> int:
    from elasticd.replay import replay

    result = replay(args.state_dir)
    jobs = result.jobs.values()
    finished = sum(1 for j in jobs if j.state.is_final)
    print(f"replayed {result.events} events from {result.segments} daemon start(s): "
          f"{result.actions} actions, {result.passes} policy passes with {result.decisions} decisions, "
          f"all as recorded; {len(result.jobs)} jobs ({finished} finished)")
    return 0

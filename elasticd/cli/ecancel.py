"""ecancel: cancel pending and running jobs, as scancel does."""

from __future__ import annotations

import argparse
import sys

from elastic_protocol.control import Cancel
from elasticd import __version__
from elasticd.cli.common import add_state_dir, run_tool
from elasticd.client import ControlClient


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ecancel", description="Cancel elastic jobs (like scancel): a pending one at "
                                "once, a running one by SIGTERM to its processes, SIGKILL after the kill-wait.")
    p.add_argument("--version", action="version", version=f"ecancel {__version__}")
    p.add_argument("job_ids", nargs="+", type=int, metavar="ID", help="the jobs to cancel")
    add_state_dir(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        with ControlClient.connect(args.state_dir, "ecancel") as client:
            answer = client.request(Cancel(job_ids=args.job_ids))
        for jid in answer.get("already_ended", []):
            state = answer["states"][str(jid)]
            # A job the daemon lost (NODE_FAIL at a restart) had its leftover processes
            # ended before its nodes were used again; say so rather than nothing.
            print(f"ecancel: job {jid} had already ended ({state}); nothing of it is left to cancel",
                  file=sys.stderr)
        # Carried out but not saved (the state directory is full): done, and an error all the
        # same, for a failed write is never silent.
        for why in (answer.get("not_saved") or {}).values():
            print(f"ecancel: error: {why}", file=sys.stderr)
        return 1 if answer.get("not_saved") else 0

    return run_tool("ecancel", body)


if __name__ == "__main__":
    sys.exit(main())

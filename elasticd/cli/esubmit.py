"""esubmit: validate job files and submit them, as sbatch does."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from elastic_protocol.control import Submit
from elasticd import __version__
from elasticd.cli.common import add_state_dir, fail, run_tool
from elasticd.client import ControlClient
from elasticd.errors import DaemonError, JobFileError
from elasticd.jobfile import load_job_file


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="esubmit", description="Submit job files to the elastic daemon (like sbatch): "
                                "each is checked first, and a wrong one is named with every problem in it.",
                                epilog="A job's output goes to its `output` file (default elastic-JOBID.out) in its "
                                "working_dir: relative to the job file's folder, or, without one, the directory "
                                "esubmit ran in.")
    p.add_argument("--version", action="version", version=f"esubmit {__version__}")
    p.add_argument("files", nargs="+", type=Path, metavar="FILE", help="job description(s) in TOML (README: Describe a job)")
    p.add_argument("--parsable", action="store_true", help="print only the job id")
    add_state_dir(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        specs = []
        bad = 0
        for f in args.files:
            try:
                specs.append((f, load_job_file(f)))
            except JobFileError as exc:
                bad += 1
                fail("esubmit", f"{exc.path}: invalid job file", exc.problems)
        if bad:
            return 1
        rc = 0
        with ControlClient.connect(args.state_dir, "esubmit") as client:
            for f, spec in specs:
                try:
                    jid = client.request(Submit(spec=spec))["job_id"]
                except DaemonError as exc:
                    if exc.code not in ("invalid_job", "job_rejected"):
                        raise
                    rc = fail("esubmit", f"{f}: {exc}", exc.details)
                    continue
                print(jid if args.parsable else f"Submitted job {jid}")
        sys.stdout.flush()
        return rc

    return run_tool("esubmit", body)


if __name__ == "__main__":
    sys.exit(main())

"""A bursty batch inside a Slurm allocation, with and without resizing the allocation itself.

On deploy/vcluster.sh's 3-node Slurm cluster (brought up here if it is not, and taken down
again; root): `salloc` + `elasticd start --launcher ssh` run the same batch -- a busy phase
(3 one-node jobs of JOB_S seconds), IDLE_S seconds with nothing to do, a second busy phase
(3 more) -- under four settings:

- fixed 3: salloc -N3, the allocation as it is (what a daemon without resizing holds);
- release: salloc -N3 --release-idle 3 (idle nodes go back; no way to get them again);
- release+grow: salloc -N3 --release-idle 3 --grow-allocation 3;
- grow from 1: salloc -N1 --grow-allocation 3 --release-idle 3 (companions on demand).

Per run, from the daemon's event log: node-seconds held by the allocation (its nodes over
time; companions included) and used by jobs, both between the first submission and the
last job's end, and the makespan over the same span. Mean and min-max over REPS runs.

    .venv/bin/python benchmarks/allocation_resize.py [--reps 3] [--readme README.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VCLUSTER = ROOT / "deploy" / "vcluster.sh"
STATE = Path(os.environ.get("VCLUSTER_STATE", "/run/elastic-vcluster"))
BIN = Path(sys.executable).parent

SETTINGS = {
    "fixed 3 nodes": (3, []),
    "release idle": (3, ["--release-idle", "3"]),
    "release idle + grow": (3, ["--release-idle", "3", "--grow-allocation", "3"]),
    "grow from 1 node": (1, ["--release-idle", "3", "--grow-allocation", "3"]),
}


def _vcluster(cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VCLUSTER), cmd], capture_output=True, text=True, timeout=600, check=False)


@contextmanager
def namespace_cluster() -> Iterator[None]:
    if os.geteuid() != 0:
        raise SystemExit("allocation_resize: needs root (it runs on deploy/vcluster.sh's network namespaces)")
    was_up = _vcluster("status").returncode == 0
    if not was_up:
        r = _vcluster("up")
        if r.returncode != 0:
            raise SystemExit(f"allocation_resize: vcluster up failed:\n{r.stdout}{r.stderr}")
    try:
        yield
    finally:
        if not was_up:
            _vcluster("down")


def env(state: Path) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(STATE / "slurm.conf"), "ELASTIC_SSH_CONFIG": str(STATE / "ssh_config"),
            "ELASTIC_STATE_DIR": str(state), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def job_file(work: Path, name: str, seconds: float) -> Path:
    path = work / f"{name}.toml"
    path.write_text(f'name = "{name}"\ncommand = ["sleep", "{seconds:g}"]\nnodes = 1\nworking_dir = "{work}"\n'
                    f'output = "{name}-%N.out"\ntime_limit = "5"\n')
    return path


def wait_for(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"allocation_resize: {what} within {timeout:.0f} s")
        time.sleep(0.2)


def run_once(setting: str, job_s: float, idle_s: float) -> dict[str, float]:
    nodes, options = SETTINGS[setting]
    scratch = Path(tempfile.mkdtemp(prefix="elastic-alloc-bench-"))
    state, work = scratch / "state", scratch / "work"
    work.mkdir()
    e = env(state)
    hold = "while elasticd status >/dev/null 2>&1; do sleep 0.3; done"
    script = f"elasticd start --launcher ssh --kill-wait 1 {' '.join(options)} && {hold}"
    log = open(scratch / "salloc.log", "w")  # noqa: SIM115 - closed below
    salloc = subprocess.Popen(["salloc", f"-N{nodes}", "-t", "10", "-J", "elastic-bench", "sh", "-c", script], env=e,
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / argv[0]), *argv[1:]], env=e, capture_output=True, text=True, timeout=60,
                              check=False)

    def states(ids: list[int]) -> list[str]:
        out = json.loads(cli("equeue", "--all", "--json").stdout or "{}")
        by = {j["job_id"]: j["state"] for j in out.get("jobs", [])}
        return [by.get(i, "?") for i in ids]

    try:
        wait_for(lambda: cli("elasticd", "status").returncode == 0 or salloc.poll() is not None, 60,
                 "the daemon did not start")
        ids: list[int] = []
        for phase in range(2):
            if phase:
                time.sleep(idle_s)
            for k in range(3):
                r = cli("esubmit", "--parsable", str(job_file(work, f"p{phase}j{k}", job_s)))
                if r.returncode != 0:
                    raise SystemExit(f"allocation_resize: esubmit: {r.stderr}")
                ids.append(int(r.stdout.strip()))
            wait_for(lambda: all(s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")
                                 for s in states(ids)), 120, "the jobs did not end")
        bad = [s for s in states(ids) if s != "COMPLETED"]
        if bad:
            raise SystemExit(f"allocation_resize: jobs ended {bad}; see {state}/daemon.log")
        cli("elasticd", "stop")
        salloc.wait(timeout=60)
        return measure(state)
    finally:
        if salloc.poll() is None:
            cli("elasticd", "stop")
            try:
                salloc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(salloc.pid, 15)
                salloc.wait(timeout=30)
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)


def measure(state: Path) -> dict[str, float]:
    """Node-seconds held and used, and the makespan, between the first submission and the
    last job's end, from the event log (the history the daemon acted on)."""
    from elasticd.eventlog import read_log

    (seg,) = read_log(state / "events.jsonl")
    held_changes: list[tuple[float, int]] = [(float(seg.header["time"]), len(seg.header["nodes"]))]
    submits: list[float] = []
    ends: list[float] = []
    used = 0.0
    starts: dict[int, float] = {}
    for rec in seg.records:
        ev = rec["event"]
        t = float(ev["time"])
        kind = ev["type"]
        if kind == "Submitted":
            submits.append(t)
        elif kind in ("NodesAdded", "NodesRemoved"):
            n = len(ev["hosts"]) * (1 if kind == "NodesAdded" else -1)
            held_changes.append((t, held_changes[-1][1] + n))
        for a in rec.get("actions", []):
            if a["type"] == "Launch" and not a.get("joining"):
                starts[a["job_id"]] = t
        if kind == "Exited" and ev["job_id"] in starts:
            used += t - starts.pop(ev["job_id"])  # one-node jobs
            ends.append(t)
    t0, t1 = min(submits), max(ends)
    held = 0.0
    for (t, n), nxt in zip(held_changes, [*held_changes[1:], (t1, 0)]):
        a, b = max(t, t0), min(nxt[0], t1)
        if b > a:
            held += n * (b - a)
    return {"held": held, "used": used, "makespan": t1 - t0}


def summary(values: list[float]) -> str:
    mean = statistics.fmean(values)
    return f"{mean:.0f} ({min(values):.0f}-{max(values):.0f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3, help="runs per setting (default 3)")
    p.add_argument("--job-seconds", type=float, default=6.0, help="each job's run time (default 6)")
    p.add_argument("--idle-seconds", type=float, default=15.0, help="the idle phase (default 15)")
    p.add_argument("--readme", type=Path, default=None, help="write the table into this README's "
                   "<!-- BEGIN allocation-resize --> section")
    args = p.parse_args()
    if shutil.which("salloc") is None and not Path("/usr/bin/salloc").exists():
        raise SystemExit("allocation_resize: needs Slurm's salloc (deploy/vcluster.sh install)")
    results: dict[str, list[dict[str, float]]] = {s: [] for s in SETTINGS}
    with namespace_cluster():
        for rep in range(args.reps):
            for setting in SETTINGS:
                r = run_once(setting, args.job_seconds, args.idle_seconds)
                results[setting].append(r)
                print(f"rep {rep + 1} {setting}: held {r['held']:.0f} node-s, used {r['used']:.0f} node-s, "
                      f"makespan {r['makespan']:.1f} s", flush=True)
    base = statistics.fmean(r["held"] for r in results["fixed 3 nodes"])
    rows = ["| setting | node-seconds held | node-seconds used | held / used | held vs fixed | makespan (s) |",
            "|---|---|---|---|---|---|"]
    for setting, runs in results.items():
        held = [r["held"] for r in runs]
        ratio = [r["held"] / r["used"] for r in runs]
        rows.append(f"| {setting} | {summary(held)} | {summary([r['used'] for r in runs])} | "
                    f"{statistics.fmean(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f}) | "
                    f"{statistics.fmean(held) / base:.2f}x | {summary([r['makespan'] for r in runs])} |")
    table = "\n".join(rows) + "\n"
    note = (f"\nBatch: 3 one-node jobs of {args.job_seconds:g} s, {args.idle_seconds:g} s idle, 3 more; mean "
            f"(min-max) of {args.reps} runs per setting on deploy/vcluster.sh's 3 nodes, from the event log "
            "between the first submission and the last job's end. Regenerate: `sudo .venv/bin/python "
            "benchmarks/allocation_resize.py --readme README.md`.\n")
    print()
    print(table + note)
    if args.readme is not None:
        sys.path.insert(0, str(ROOT))
        from elasticd.experiments.evaluate import update_readme

        update_readme(args.readme, "allocation-resize", table + note)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/bin/bash
# elastic in a Slurm batch job: start elasticd on the allocation's nodes, run a batch of
# job files through it (at their submit_offset), write the report, stop the daemon.
#
#   sbatch -N 4 -t 1:00:00 deploy/sbatch-elastic.sh JOB_DIR [elasticd start options...]
#   e.g. sbatch -N 8 deploy/sbatch-elastic.sh examples/malleable --policy malleable
#
# Environment (all optional):
#   ELASTIC_VENV        virtualenv elastic is installed in, on a file system every node sees
#                       (default: $SLURM_SUBMIT_DIR/.venv)
#   ELASTIC_SSH_CONFIG  ssh_config for reaching the nodes (default: ~/.ssh/config)
#   ELASTIC_REPORT      report path prefix (default: $SLURM_SUBMIT_DIR/elastic-report-$SLURM_JOB_ID):
#                       PREFIX.txt (the metrics table) and PREFIX.json (per job and overall)
#
# The daemon runs on the batch host (the allocation's first node) and starts each job's
# processes over SSH; job output goes where the job files say, which must be on a shared
# file system (as $HOME is on most clusters). sbatch's usual --output holds the daemon's
# start message and the report; the daemon's own log is in $ELASTIC_STATE_DIR/daemon.log.
#SBATCH --job-name=elastic
#SBATCH --output=elastic-%j.log
set -euo pipefail

: "${SLURM_JOB_ID:?run this with sbatch (or inside salloc)}"
jobs_dir=${1:?usage: sbatch -N N deploy/sbatch-elastic.sh JOB_DIR [elasticd start options]}
shift
submit_dir=${SLURM_SUBMIT_DIR:-$PWD}
venv=${ELASTIC_VENV:-$submit_dir/.venv}
[ -x "$venv/bin/elasticd" ] || { echo "sbatch-elastic: no elasticd in $venv (set ELASTIC_VENV)" >&2; exit 2; }
export PATH="$venv/bin:$PATH"
export ELASTIC_STATE_DIR=${ELASTIC_STATE_DIR:-$HOME/.elastic/slurm-$SLURM_JOB_ID}
report=${ELASTIC_REPORT:-$submit_dir/elastic-report-$SLURM_JOB_ID}
case "$jobs_dir" in /*) ;; *) jobs_dir="$submit_dir/$jobs_dir" ;; esac

elasticd start "$@"
trap 'elasticd stop || true' EXIT

# Submit at the offsets the files give, wait for every job, print and save the report.
python3 - "$jobs_dir" "$report" <<'PY'
import contextlib
import io
import json
import sys
import time
from pathlib import Path

from elastic_protocol.control import Queue, QueueDocument, Status, Submit, Wait
from elasticd.experiments.batchrun import load_batch, print_report, report_json
from elasticd.client import ControlClient

jobs_dir, report = Path(sys.argv[1]), sys.argv[2]
with ControlClient.connect(None, "sbatch-elastic") as c:
    status = c.request(Status())
    nodes = len(status["nodes"])
    specs = sorted(load_batch([jobs_dir], nodes), key=lambda s: s.submit_offset)
    t0 = time.monotonic()
    ids = []
    for spec in specs:
        delay = spec.submit_offset - (time.monotonic() - t0)
        if delay > 0:
            time.sleep(delay)
        ids.append(c.request(Submit(spec=spec))["job_id"])
    print(f"sbatch-elastic: submitted {len(ids)} jobs from {jobs_dir} to {nodes} nodes", flush=True)
    c.request(Wait(job_ids=ids), timeout=None)
    doc = QueueDocument.model_validate(c.request(Queue(job_ids=ids, all=True)))
text = io.StringIO()
with contextlib.redirect_stdout(text):
    print_report(doc, nodes)
print(text.getvalue(), end="")
Path(report + ".txt").write_text(text.getvalue())
Path(report + ".json").write_text(json.dumps(report_json(doc, nodes, status["policy"]), indent=2))
print(f"sbatch-elastic: report in {report}.txt and {report}.json")
sys.exit(0 if all(j.state == "COMPLETED" for j in doc.jobs) else 3)
PY

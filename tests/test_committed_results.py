"""The committed evaluation is what its files say: every run's per-job file is in the
repository, a run's figures are recomputed from its file alone, and the README's table is
what `elasticd evaluate` writes from the committed runs."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from elasticd.experiments.evaluate import DEFAULT_POLICIES, Results
from elasticd.experiments.evaluation_report import readme_table
from elasticd.metrics import summarize_window
from elasticd.perjob import read
from elasticd.sim.grid import METRICS

ROOT = Path(__file__).resolve().parent.parent
EVALUATION = ROOT / "docs" / "results" / "evaluation"


def _runs() -> list[dict[str, object]]:
    return [json.loads(ln) for ln in (EVALUATION / "runs.jsonl").read_text().splitlines() if ln.strip()]


def test_every_committed_run_has_its_per_job_file_and_some_recompute_their_figures_exactly() -> None:
    runs = _runs()
    assert runs
    for r in runs:
        f = EVALUATION / "jobs" / str(r["file"])
        assert f.stat().st_size == r["file_bytes"], f
    # One run of each trace, load and rule, recomputed from its file alone.
    seen: set[tuple[object, ...]] = set()
    for r in runs:
        key = (r["trace"], r["load"], r["rule"], r["fraction"] > 0)  # type: ignore[operator]
        if key in seen:
            continue
        seen.add(key)
        f = read(EVALUATION / "jobs" / str(r["file"]))
        again = asdict(summarize_window(f.rows, f.machine_nodes, *f.window))
        assert {m: again[m] for m in METRICS} == {m: r[m] for m in METRICS}, r["file"]
    assert len(seen) >= 6


def test_the_readmes_evaluation_table_is_what_evaluate_writes_from_the_committed_runs() -> None:
    results = Results.load(EVALUATION / "runs.jsonl")
    traces = sorted({k.trace for k in results.rows})
    fractions = sorted({k.fraction for k in results.rows})
    table = readme_table(results, traces, list(DEFAULT_POLICIES), fractions)
    readme = (ROOT / "README.md").read_text()
    section = readme.split("<!-- BEGIN evaluation -->\n", 1)[1].split("<!-- END evaluation -->", 1)[0]
    assert section == table

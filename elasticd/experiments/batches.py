"""Seeded job batches the way the APGAS/GLB seed paper builds them.

25 jobs per batch on 32 nodes, aiming at about 8 node-hours (a 15-minute batch at full
scale); job types drawn from a weighted table; the first 5 jobs submitted at once and the
rest uniformly over a 10-minute window; the same rigid batch then made 20/40/.../100 %
malleable by a seeded, nested choice of jobs.

The paper's Table 2 (types, node ranges, weights) is not reproduced in its text, so the
table below follows its description: its four programs in several sizes, each with a node
range inside which it scales strongly, weights meant to bring 25 jobs to about 8
node-hours (they give 9.1 on average over seeds 1-200, 4.4 to 15.5: `node_hours`).
Jobs are the synthetic model application, so a batch costs almost no CPU; `time_scale`
shrinks every duration (0.0667 turns the 15-minute batch into about one minute).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from elasticd.errors import ElasticError


@dataclass(frozen=True)
class JobType:
    name: str
    work: float  # seconds on one node at full scale
    serial_fraction: float
    min_nodes: int
    max_nodes: int
    rigid_nodes: int  # the size a rigid submission asks for
    weight: float


# Work is in node-seconds at one node; rigid sizes sit in the strong-scaling range.
JOB_TYPES: tuple[JobType, ...] = (
    JobType("uts-d18", 300.0, 0.010, 1, 4, 2, 4.0),
    JobType("uts-d19", 1200.0, 0.008, 2, 8, 4, 3.0),
    JobType("uts-d20", 4800.0, 0.005, 4, 16, 8, 1.0),
    JobType("nqueens-17", 450.0, 0.010, 1, 8, 2, 3.0),
    JobType("nqueens-18", 2700.0, 0.006, 2, 16, 8, 1.5),
    JobType("bc-17", 360.0, 0.020, 1, 4, 2, 3.0),
    JobType("bc-18", 1440.0, 0.015, 2, 8, 4, 2.0),
    JobType("bc-19", 5760.0, 0.010, 4, 16, 8, 0.7),
    JobType("pi-small", 240.0, 0.002, 1, 8, 2, 3.0),
    JobType("pi-large", 3600.0, 0.002, 4, 16, 8, 1.0),
)


@dataclass(frozen=True)
class BatchJob:
    index: int
    type: JobType
    submit: float  # seconds after the batch starts (full scale)


def generate_batch(seed: int, jobs: int = 25, window: float = 600.0, at_once: int = 5) -> list[BatchJob]:
    rng = random.Random(seed)
    types = rng.choices(JOB_TYPES, weights=[t.weight for t in JOB_TYPES], k=jobs)
    submits = [0.0] * min(at_once, jobs) + sorted(rng.uniform(0, window) for _ in range(jobs - min(at_once, jobs)))
    return [BatchJob(i, t, s) for i, (t, s) in enumerate(zip(types, submits))]


def malleable_set(batch: list[BatchJob], fraction: float, seed: int) -> set[int]:
    """Jobs made malleable at `fraction`; nested in the fraction for one seed."""
    order = list(range(len(batch)))
    random.Random(seed * 7919 + 1).shuffle(order)
    return set(order[: round(fraction * len(batch))])


def node_hours(batch: list[BatchJob]) -> float:
    """Demand of the rigid batch: each job's run time at its rigid size times that size."""
    total = 0.0
    for b in batch:
        t = b.type
        s = 1.0 / (t.serial_fraction + (1 - t.serial_fraction) / t.rigid_nodes)
        total += t.work / s * t.rigid_nodes
    return total / 3600


def write_batch(
    folder: Path,
    batch: list[BatchJob],
    malleable: set[int],
    time_scale: float,
    python: str = "python3",
    alpha: float = 0.1,
) -> list[Path]:
    """Job files for `elasticd run`: the synthetic app with each type's model, so that the
    simulator can replay the very same jobs from the files' [model] sections."""
    if not 0 < time_scale <= 1:
        raise ElasticError("time scale must be in (0, 1]")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "out").mkdir(exist_ok=True)
    paths = []
    for b in batch:
        t = b.type
        work = t.work * time_scale
        s_min = 1.0 / (t.serial_fraction + (1 - t.serial_fraction) / t.min_nodes)
        # Limit: the run at the smallest size it may get, with room for resizes.
        limit = max(60, int(2 * work / s_min) + 30)
        mall = b.index in malleable
        nodes = f"{{ min = {t.min_nodes}, max = {t.max_nodes}, preferred = {t.rigid_nodes} }}" if mall else str(t.rigid_nodes)
        kind = "malleable" if mall else "rigid"
        speedup = f"amdahl:{t.serial_fraction}"
        p = folder / f"{b.index:02d}-{t.name}.toml"
        p.write_text(
            f'''# batch job {b.index}: {t.name} ({kind})
working_dir = "."
name = "{t.name}-{b.index}"
command = ["{python}", "-m", "elastic_apps.synthetic", "--work", "{work:.3f}", "--speedup", "{speedup}", "--alpha", "{alpha}", "--step", "0.25"]
nodes = {nodes}
kind = "{kind}"
time_limit = "{limit // 60}:{limit % 60:02d}"
submit_offset = {b.submit * time_scale:.3f}
output = "out/%x-%j.out"

[model]
speedup = "{speedup}"
work = {work:.3f}
alpha = {alpha}
'''
        )
        paths.append(p)
    return paths

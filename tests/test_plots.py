"""What the plots draw, read back as numbers: Gantt colours that neighbours never share,
labels where a job is widest, utilization averaged into a readable line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from elasticd.sim.plots import binned, job_colors, label_spot, plot_gantt


@dataclass
class Ev:
    time: float
    event: str
    hosts: list[str]


@dataclass
class J:
    job_id: int
    events: list[Ev] = field(default_factory=list)


def job(jid: int, start: float, end: float, hosts: list[str]) -> J:
    return J(jid, [Ev(start, "started", hosts), Ev(end, "ended", [])])


def test_jobs_next_to_each_other_in_start_order_never_share_a_colour() -> None:
    jobs = [job(i, float(i), float(i) + 5, ["n1"]) for i in range(1, 46)]
    colors = job_colors(list(reversed(jobs)))  # the order given does not matter
    by_start = [colors[j.job_id] for j in jobs]
    for k in range(len(by_start) - 19):
        assert len(set(by_start[k:k + 20])) == 20


def test_a_jobs_label_sits_in_the_middle_of_its_widest_stretch() -> None:
    nodes = {f"n{i}": i - 1 for i in range(1, 5)}
    j = J(7, [Ev(0.0, "started", ["n1"]), Ev(10.0, "grown", ["n1", "n2", "n3"]), Ev(40.0, "shrunk", ["n1"]),
              Ev(45.0, "ended", [])])
    assert label_spot(j, nodes) == (25.0, 1.5)
    assert label_spot(J(8, [Ev(0.0, "submitted", [])]), nodes) is None


def test_a_long_utilization_series_is_averaged_over_time_not_thinned() -> None:
    # 0 busy for the first half, 10 for the second, in 20,000 steps.
    pts = [(float(t), 0.0 if t < 10_000 else 10.0) for t in range(20_000)]
    out = binned(pts, bins=100)
    assert len(out) == 100
    assert [round(v, 6) for _, v in out[:50]] == [0.0] * 50
    assert all(v == pytest.approx(10.0) for _, v in out[51:])
    short = [(0.0, 1.0), (5.0, 2.0)]
    assert binned(short) == short


@pytest.mark.timeout(60)
def test_the_gantt_chart_is_drawn_with_labels_marks_and_legend(tmp_path: Path) -> None:
    nodes = {f"n{i}": i - 1 for i in range(1, 5)}
    jobs = [J(1, [Ev(0.0, "started", ["n1", "n2"]), Ev(30.0, "shrunk", ["n1"]), Ev(60.0, "ended", [])]),
            job(2, 30.0, 90.0, ["n2", "n3", "n4"])]
    path = plot_gantt(jobs, nodes, 0.0, 100.0, tmp_path / "g.png", "two jobs", time_unit=1.0, unit_name="s")
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 10_000

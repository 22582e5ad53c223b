"""fast_init: the quicker constructor the core's events and actions and the policies' views
and decisions get must build exactly what the dataclass's own __init__ builds."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from elastic_protocol.jobspec import JobKind
from elasticd.core import actions, events
from elasticd.core.fastinit import fast_init
from elasticd.policies.base import Grow, PendingView, RunningView, Snapshot


@dataclasses.dataclass(frozen=True, slots=True)
class _Base:
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class _Sample(_Base):
    job_id: int
    hosts: tuple[str, ...] = ()
    note: str | None = None
    derived: int = dataclasses.field(init=False, default=0)
    doubled: int = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "doubled", 2 * self.job_id)


def _reference(**kwargs: Any) -> _Sample:
    """Made by the dataclass's own __init__ (before fast_init replaced it)."""
    return _Sample(**kwargs)


def test_fast_init_builds_what_the_dataclass_builds_defaults_post_init_and_all() -> None:
    cases: list[dict[str, Any]] = [{"time": 1.0, "job_id": 3},
                                   {"time": 2.0, "job_id": 4, "hosts": ("a", "b"), "note": "x"}]
    before = [_reference(**c) for c in cases]
    fast_init(_Sample)
    after = [_Sample(**c) for c in cases]
    assert after == before
    assert [(a.derived, a.doubled) for a in after] == [(b.derived, b.doubled) for b in before]
    assert _Sample(5.0, 6, ("h",)) == _Sample(time=5.0, job_id=6, hosts=("h",))  # positional too
    with pytest.raises(TypeError):
        _Sample(1.0)  # type: ignore[call-arg]  # a required field still required


def test_instances_made_by_fast_init_stay_frozen() -> None:
    view = RunningView(1, JobKind.MALLEABLE, 4, 1, 8, 4, 0.0, 100, True, None, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.size = 5  # type: ignore[misc]
    assert dataclasses.replace(view, size=5).size == 5
    assert view.shrinking == 0 and view.history == () and view.limit_end is None  # defaults


def test_a_pending_view_still_works_out_its_start_nodes() -> None:
    steps = ((10.0, 3), (20.0, 5))
    assert PendingView(1, 0.0, JobKind.EVOLVING, 2, 8, 4, None, None, steps).start_nodes == 3
    assert PendingView(2, 0.0, JobKind.RIGID, 2, 2, 2, 10.0).start_nodes == 2


def test_every_event_action_view_and_decision_has_the_quicker_constructor() -> None:
    types = [*events.EVENT_TYPES, actions.Launch, actions.Terminate, actions.LaunchJoining, actions.SendOrder,
             actions.Reclaim, actions.ArmLimit, PendingView, RunningView, Snapshot, Grow]
    # The dataclass's own __init__ sets every field through object.__setattr__; fast_init's never.
    assert [t.__name__ for t in types if "__setattr__" in vars(t)["__init__"].__code__.co_names] == []


def test_fast_init_refuses_a_class_it_cannot_serve_exactly() -> None:
    @dataclasses.dataclass(slots=True)
    class NotFrozen:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class WithFactory:
        a: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class KeywordOnly:
        a: int

    for cls in (NotFrozen, WithFactory, KeywordOnly):
        with pytest.raises(TypeError):
            fast_init(cls)

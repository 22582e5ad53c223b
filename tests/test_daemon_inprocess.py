"""The daemon's own logic, in-process and on a clock moved by hand: timers fire at the
times the core asked for, bursts of events cost one policy pass, and every accepted event
reaches the event log (which replays to the same decisions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon_support import inprocess_daemon, settle
from elastic_protocol.jobspec import JobSpec
from elasticd.core.events import PassDue
from elasticd.errors import OrderRejected
from elasticd.eventlog import LOG_FILE, read_log
from elasticd.replay import replay

pytestmark = pytest.mark.timeout(60)


def spec(name: str, nodes: object, limit: str | None = None, kind: str | None = None) -> JobSpec:
    return JobSpec.model_validate({"name": name, "command": ["true"], "nodes": nodes, "time_limit": limit,
                                   "kind": kind})


class Link:
    """An application connection that records what the daemon sends it."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def send(self, line: bytes) -> bool:
        self.lines.append(line.decode().strip())
        return True

    pending = False  # what a test says waits in the socket

    def pending_input(self) -> bool:
        return self.pending


async def test_a_time_limit_ends_the_job_when_the_clock_reaches_start_plus_limit(tmp_path: Path) -> None:
    async with inprocess_daemon(tmp_path / "state") as (d, clock, launcher):
        jid = d.submit(spec("capped", 2, limit="1:00"))
        await settle()
        job = d.core.job(jid)
        assert job.state.value == "RUNNING" and job.launched and job.start_time == clock.now()
        await clock.advance(59.9)
        assert job.state.value == "RUNNING" and launcher.terminated == []
        await clock.advance(0.2)
        assert launcher.terminated == [jid]
        assert job.state.value == "TIMEOUT" and job.end_time == job.start_time + 60.0


async def test_an_unanswered_shrink_is_decided_at_its_deadline(tmp_path: Path) -> None:
    async with inprocess_daemon(tmp_path / "state", order_deadline=30.0) as (d, clock, launcher):
        jid = d.submit(spec("m", {"min": 1, "max": 4}, kind="malleable"))
        await settle()
        link = Link()
        d.app_register(jid, link)
        d.resize(jid, 2)
        assert link.lines and link.lines[0].startswith("shrink 2 ")
        await clock.advance(29.0)
        assert d.core.job(jid).order is not None
        await clock.advance(1.5)
        job = d.core.job(jid)
        assert job.order is None and job.hosts == ["node1", "node2"]
        assert [e.event for e in job.events][-2:] == ["deadline_missed", "shrunk"]
        assert launcher.running[jid] == {"node1", "node2"}
        # The application is told: the order is void, and which hosts the job has now (the
        # last of its list were taken); an answer it sends late is refused as expired.
        order_id = int(link.lines[0].split("order=")[1].split()[0])
        assert link.lines[-1] == f"hosts node1 node2 reason=deadline order={order_id}"
        with pytest.raises(OrderRejected) as refused:
            d.app_answer(jid, "shrunk", order_id, ["node3", "node4"], "node3 node4")
        assert refused.value.code == "expired" and "the job's hosts are now: node1 node2" in str(refused.value)


async def test_a_deadline_waits_for_an_answer_already_in_the_socket(tmp_path: Path) -> None:
    async with inprocess_daemon(tmp_path / "state", order_deadline=30.0) as (d, clock, _launcher):
        jid = d.submit(spec("m", {"min": 1, "max": 4}, kind="malleable"))
        await settle()
        link = Link()
        link.pending = True  # the answer arrived while the daemon was paused, not read yet
        d.app_register(jid, link)
        d.resize(jid, 2)
        order_id = int(link.lines[0].split("order=")[1].split()[0])
        await clock.advance(31.0)
        assert d.core.job(jid).order is not None, "the deadline fired before the waiting answer was read"
        link.pending = False
        d.app_answer(jid, "shrunk", order_id, ["node3", "node4"], "node3 node4")
        assert "deadline_missed" not in [e.event for e in d.core.job(jid).events]


async def test_a_burst_of_submissions_costs_one_policy_pass(tmp_path: Path) -> None:
    async with inprocess_daemon(tmp_path / "state", nodes=2) as (d, _clock, launcher):
        ids = [d.submit(spec(f"j{i}", 1, limit="10")) for i in range(50)]
        await settle()
        d.persist()
        records = [r for s in read_log(tmp_path / "state" / LOG_FILE) for r in s.records]
        kinds = [r["event"]["type"] for r in records]
        after = kinds[kinds.index("Submitted"):]  # the start's own pass came before
        assert after.count("Submitted") == 50
        assert after.count(PassDue.__name__) == 1
        assert [len(req.hosts) for req in launcher.launches] == [1, 1]
        assert {req.job_id for req in launcher.launches} == set(ids[:2])


async def test_an_acknowledged_submission_is_in_the_event_log_before_the_next_turn_of_the_loop(
        tmp_path: Path) -> None:
    """The journal holds a submission once it is acknowledged; its log record was written
    only with the next commit (the pass a loop turn later), so a kill -9 in between left a
    job in the journal that the log never saw, and replay stopped at it after the restart."""
    async with inprocess_daemon(tmp_path / "state", nodes=2) as (d, _clock, _launcher):
        await settle()
        jid = d.submit(spec("j", 1, limit="10"))  # acknowledged: no await since, no pass yet
        records = [r for s in read_log(tmp_path / "state" / LOG_FILE) for r in s.records]
        assert [r["event"]["job_id"] for r in records if r["event"]["type"] == "Submitted"] == [jid]


async def test_the_periodic_pass_follows_the_clock_and_the_log_replays(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with inprocess_daemon(state, nodes=2, schedule_interval=5.0) as (d, clock, launcher):
        a = d.submit(spec("a", 2, limit="1"))
        b = d.submit(spec("b", 1, limit="1"))
        await settle()
        passes = lambda: sum(1 for s in read_log(state / LOG_FILE) for r in s.records
                             if r["event"]["type"] == "PassDue")
        d.persist()
        before = passes()
        await clock.advance(12.0)  # two ticks while jobs exist
        d.persist()
        assert passes() == before + 2
        await launcher.exit(a, 0, None)
        await settle()
        assert d.core.job(b).state.value == "RUNNING"
    result = replay(state)
    assert result.core.job(a).state.value == "COMPLETED" and result.core.job(b).state.value == "CANCELLED"


async def test_a_held_resize_is_not_undone_by_the_policy_until_released(tmp_path: Path) -> None:
    # minAgree gives idle nodes to the narrowest malleable job at every pass.
    async with inprocess_daemon(tmp_path / "state", policy="malleable", min_resize_interval=1.0,
                                schedule_interval=0.5) as (d, clock, _launcher):
        jid = d.submit(spec("m", {"min": 1, "max": 4}, kind="malleable"))
        await settle()
        link = Link()
        d.app_register(jid, link)
        await settle()

        def answer_last() -> None:
            words = link.lines[-1].split()
            order_id = int(next(w for w in words if w.startswith("order="))[6:])
            if words[0] == "grow":
                hosts = [*d.core.job(jid).hosts, *(w for w in words[2:] if "=" not in w)]
                d.app_answer(jid, "grown", order_id, sorted(set(hosts)), "")
            else:
                gone = d.core.job(jid).hosts[-int(words[1]):]
                d.app_answer(jid, "shrunk", order_id, gone, " ".join(gone))

        answer_last()  # minAgree started it at its minimum and grew it into the idle nodes
        await settle()
        assert d.core.job(jid).size == 4
        await clock.advance(2.0)
        d.resize(jid, 2, hold=True)
        answer_last()
        await settle()
        assert d.core.job(jid).size == 2
        sent = len(link.lines)
        for _ in range(20):  # ten seconds of passes: two idle nodes, and a policy that would grow it
            await clock.advance(0.5)
        assert len(link.lines) == sent, link.lines[sent:]
        assert d.core.job(jid).held and [e.event for e in d.core.job(jid).events].count("held") == 1
        d.release_hold(jid)
        await clock.advance(1.0)
        assert link.lines[-1].startswith("grow 2 "), link.lines[sent:]
        assert not d.core.job(jid).held


async def test_the_queue_notes_say_why_pending_who_resizes_and_who_never_registered(tmp_path: Path) -> None:
    from elasticd.daemon.views import UNREGISTERED_AFTER, job_note

    async with inprocess_daemon(tmp_path / "state", nodes=4) as (d, clock, _launcher):
        quiet = d.submit(spec("quiet", {"min": 1, "max": 2}, kind="malleable"))
        talker = d.submit(spec("talker", {"min": 1, "max": 2}, kind="malleable"))
        head = d.submit(spec("head", 4))
        behind = d.submit(spec("behind", 1))
        await settle()
        note = lambda jid: job_note(d.core.job(jid), d.now(), jid == d.core.pending_ids[0])
        assert (note(head), note(behind)) == ("Resources", "Priority")
        link = Link()
        d.app_register(talker, link)
        d.resize(talker, 1)
        assert note(talker) == "ResizeBy:user"
        assert note(quiet) is None
        await clock.advance(UNREGISTERED_AFTER + 1)
        assert note(quiet) == "NotRegistered"  # (the talker registered, and its order has settled)
        assert note(talker) is None
        d.app_lost(talker, link)  # its connection closed: rigid until it registers again
        assert note(talker) == "Disconnected"
        d.app_register(talker, link)
        assert note(talker) is None

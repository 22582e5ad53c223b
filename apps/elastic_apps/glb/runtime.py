"""Running a GLB problem as an elastic job: one process per host (as elastic launches
jobs), optionally forked into several places per host, found through the daemon's put/get
store, malleable unless told to be rigid.

    python -m elastic_apps.glb.apps.uts --depth 13 [--places-per-host 2] [--rigid]

The first process of the job (index 0, not joining) is place 0: it publishes its address,
admits the others, registers the malleability handler, and at the end disables it,
reduces the result and prints one JSON line (`{"glb": name, ...}`) on its stdout.
`--sequential` runs the problem in this process without a daemon (a reference run).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

from elastic_apps.channel import JobChannel
from elastic_apps.env import JobEnv, job_env
from elastic_apps.glb.bag import Problem, Result
from elastic_apps.glb.coordinator import Coordinator, HandlerGate
from elastic_apps.glb.malleable import GLBHandler
from elastic_apps.glb.place import Message, Place, PlaceConfig
from elastic_apps.glb.transport import Transport

ROOT_KEY = "glb-place0"


@dataclass(frozen=True)
class RuntimeOptions:
    places_per_host: int = 1
    granularity: int | None = None
    random_steals: int = 1
    lifeline_base: int = 2
    rigid: bool = False
    sequential: bool = False
    pause_file: str | None = None
    pause_after: int = 0
    join_timeout: float = 60.0


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("GLB runtime")
    g.add_argument("--places-per-host", type=int, default=1, metavar="K",
                   help="places (processes, one worker each) per host; the extra ones are forked")
    g.add_argument("--granularity", type=int, default=None, metavar="N",
                   help="units of work per process() call (default: the problem's)")
    g.add_argument("--random-steals", type=int, default=1, metavar="W",
                   help="random steal attempts before setting lifelines (default 1)")
    g.add_argument("--lifeline-base", type=int, default=2, metavar="Z",
                   help="base of the cyclic hypercube of lifelines (default 2: a hypercube)")
    g.add_argument("--rigid", action="store_true", help="do not register for resize orders")
    g.add_argument("--sequential", action="store_true",
                   help="run in this process, without a daemon (a reference run)")
    g.add_argument("--pause-file", default=None, metavar="PATH",
                   help="while PATH exists, places that did --pause-after units stop processing "
                        "(they still answer steals and orders): holds work in the bags for tests")
    g.add_argument("--pause-after", type=int, default=0, metavar="UNITS")


def runtime_options(args: argparse.Namespace) -> RuntimeOptions:
    if args.places_per_host < 1:
        raise SystemExit("--places-per-host must be at least 1")
    if args.lifeline_base < 2:
        raise SystemExit("--lifeline-base must be at least 2")
    return RuntimeOptions(
        places_per_host=args.places_per_host,
        granularity=args.granularity,
        random_steals=max(0, args.random_steals),
        lifeline_base=args.lifeline_base,
        rigid=args.rigid,
        sequential=args.sequential,
        pause_file=args.pause_file,
        pause_after=args.pause_after,
    )


def run_sequential(problem: Problem[Any, Any], granularity: int | None = None) -> tuple[Result, float]:
    """The whole problem in one bag, in this process: the reference for a parallel run."""
    t0 = time.perf_counter()
    bag = problem.initial_work(0, 1) or problem.empty_bag()
    n = granularity or problem.granularity
    while bag.process(n):
        pass
    result = problem.new_result()
    bag.submit(result)
    return result, time.perf_counter() - t0


def run(problem: Problem[Any, Any], opts: RuntimeOptions) -> int:
    """Run `problem` as (one process of) an elastic job; returns the exit code."""
    if opts.sequential:
        result, seconds = run_sequential(problem, opts.granularity)
        _print_line({"glb": problem.name, **problem.report(result), "places": 1,
                     "mode": "sequential", "elapsed_s": round(seconds, 6)})
        return 0
    env = job_env()
    local_index = 0
    children: list[int] = []
    sys.stdout.flush()
    sys.stderr.flush()
    # Fork before any thread exists (the daemon connection starts threads).
    for i in range(1, opts.places_per_host):
        pid = os.fork()
        if pid == 0:
            local_index, children = i, []
            break
        children.append(pid)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"glb[{env.host}/{local_index}] %(levelname)s %(message)s")
    try:
        code = _run_place(problem, opts, env, local_index)
    except BaseException:  # noqa: BLE001 - a forked place must never return into the caller
        traceback.print_exc()
        code = 1
    if local_index != 0:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    for pid in children:
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            code = code or 1
    return code


def _run_place(problem: Problem[Any, Any], opts: RuntimeOptions, env: JobEnv, local_index: int) -> int:
    inbox: queue.SimpleQueue[Message] = queue.SimpleQueue()
    job = JobChannel.connect(env)
    transport = Transport(env.secret.encode(), job.local_address, inbox)
    transport.start()
    config = PlaceConfig(
        granularity=opts.granularity or problem.granularity,
        random_steals=opts.random_steals,
        lifeline_base=opts.lifeline_base,
        pause_file=opts.pause_file,
        pause_after=opts.pause_after,
    )
    place = Place(problem, config, transport, inbox, env.host, local_index)
    try:
        if env.is_leader and local_index == 0:
            return _run_root(problem, opts, env, job, place)
        root_address = job.wait_value(ROOT_KEY, timeout=opts.join_timeout)
        job.close()
        if place.join(root_address, env.joining, opts.join_timeout):
            place.run()
            place.send_final_result()
        return 0
    finally:
        job.close()
        transport.close()


def _run_root(problem: Problem[Any, Any], opts: RuntimeOptions, env: JobEnv, job: JobChannel, place: Place) -> int:
    gate = HandlerGate(place.inbox)
    coordinator = Coordinator(place, list(env.hosts), opts.places_per_host, gate)
    job.put(ROOT_KEY, place.transport.address)
    t_launch = time.monotonic()
    coordinator.start(opts.join_timeout)
    resizes: list[dict[str, Any]] = []
    if not opts.rigid:
        job.register(GLBHandler(job, place.inbox, gate, resizes))
    t0 = time.monotonic()
    place.run()
    if not opts.rigid:
        job.disable()  # before the reduction: the places' partial results must stay put
    total = coordinator.finish(opts.join_timeout)
    elapsed = time.monotonic() - t0
    stats = coordinator.place_stats()
    _print_line({
        "glb": problem.name,
        **problem.report(total),
        "places": len(coordinator.members),
        "initial_places": len(env.hosts) * opts.places_per_host,
        "places_per_host": opts.places_per_host,
        "hosts": list(job.hosts),
        "malleable": not opts.rigid,
        "startup_s": round(t0 - t_launch, 6),
        "elapsed_s": round(elapsed, 6),
        "resizes": resizes,
        "operations": coordinator.operations,
        "place_stats": stats,
    })
    return 0


def _print_line(doc: dict[str, Any]) -> None:
    print(json.dumps(doc, separators=(", ", ": ")), flush=True)


def main_for(problem: Problem[Any, Any], args: argparse.Namespace) -> int:
    """What an application's main() ends with."""
    return run(problem, runtime_options(args))

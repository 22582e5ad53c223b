"""Lifeline-based global load balancing (GLB): write a bag, get a distributed, malleable
program.

    from elastic_apps.glb import Bag, Problem, Result, add_runtime_arguments, main_for

    class MyBag(Bag[MyResult]): ...            # process / split / merge / is_empty /
                                               # is_splittable / submit
    class MyProblem(Problem[MyBag, MyResult]): ...   # empty_bag / initial_work / new_result

    args = parser.parse_args()                 # with add_runtime_arguments(parser)
    sys.exit(main_for(MyProblem(...), args))

Each process of the job is a place (or several, `--places-per-host`); places steal work
from random places, then wait on lifelines (a cyclic hypercube); place 0 detects global
termination and reduces the result. The job is malleable with no code in the bag: the
runtime's handler moves the work off places that leave and brings new places in.
Applications: `python -m elastic_apps.glb.apps.{uts,nqueens,pi,bc}`.
"""

from elastic_apps.glb.bag import Bag, Problem, Result
from elastic_apps.glb.runtime import (
    RuntimeOptions,
    add_runtime_arguments,
    main_for,
    run,
    run_sequential,
    runtime_options,
)

__all__ = [
    "Bag",
    "Problem",
    "Result",
    "RuntimeOptions",
    "add_runtime_arguments",
    "main_for",
    "run",
    "run_sequential",
    "runtime_options",
]

"""`elasticd run`: one command from job files to a metrics table, on a private daemon."""

from __future__ import annotations

import argparse
import json

from elasticd.daemonctl import node_names_for, tuning_args
from elasticd.errors import ElasticError


def run_batch(args: argparse.Namespace) -> int:
    from elasticd.cli.common import policy_settings
    from elasticd.experiments.batchrun import (
        BatchStopped,
        execute_batch,
        load_batch,
        print_report,
        queue_rows,
        report_json,
    )

    nodes = len(node_names_for(args))
    policy_settings(args.policy, args.policy_config, args.policy_param, args.min_resize_interval)
    specs = load_batch(args.targets, nodes)
    try:
        doc, done, by_id = execute_batch(specs, nodes, args.policy, args.kill_wait, tuning_args(args),
                                  offsets=not args.no_offsets, timeout=args.timeout)
    except BatchStopped as exc:
        print(f"elasticd run: {exc}")
        return 128 + exc.signum
    print_report(doc, nodes, queue_rows(doc, by_id))
    if args.json:
        args.json.write_text(json.dumps(report_json(doc, nodes, args.policy, by_id), indent=2))
    if not done:
        raise ElasticError(f"the batch did not finish within {args.timeout} s; the rest was cancelled")
    return 0 if all(j.state == "COMPLETED" for j in doc.jobs) else 2



"""CLI verb ``render-queue``: print the Volcano Queue of a team's share, for ``kubectl apply``.

Its own module (registered in ``main.COMMAND_MODULES``) so the scheduling area adds a verb without
touching another area's code. The Queue comes from the same builder the cluster tier applies
(:func:`~ctr_volcano.training.volcano.queue.build_queue`); ``--check-crd`` also validates it against
Volcano's Queue CRD file.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register", "render_queue"]


def render_queue(args: argparse.Namespace) -> int:
    """Handler of ``render-queue``."""
    from ctr_volcano.app.cli.volcano import parse_key_values
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.volcano.manifest import to_yaml
    from ctr_volcano.training.volcano.queue import QueueSpec, build_queue, validate_queue_against_crd

    spec = QueueSpec(
        name=args.name, weight=args.weight, reclaimable=args.reclaimable, priority=args.priority,
        deserved=parse_key_values(args.deserved, "--deserved"),
        capability=parse_key_values(args.capability, "--capability"),
        guarantee=parse_key_values(args.guarantee, "--guarantee"))
    queue = build_queue(spec)
    if args.check_crd:
        problems = validate_queue_against_crd(queue, args.check_crd)
        if problems:
            raise BadInput("--check-crd", args.check_crd, "the Queue does not match the CRD schema: "
                           + "; ".join(problems))
    sys.stdout.write(json.dumps(queue, indent=2) + "\n" if args.output == "json" else to_yaml(queue))
    return 0


def register(subparsers: Any) -> None:
    """Add ``render-queue`` to the ``ctr-volcano`` command line."""
    p = subparsers.add_parser(
        "render-queue", help="print a Volcano Queue: a team's share of the cluster (YAML)",
        description="Print the scheduling.volcano.sh/v1beta1 Queue for a team. With the recommended "
                    "scheduler configuration (deploy/volcano-scheduler.conf) a queue's share is "
                    "--deserved, in whole gangs (docs/scheduling.md).")
    p.add_argument("--name", required=True, help="queue name (Jobs name it with --queue)")
    p.add_argument("--weight", type=int, default=1,
                   help="weight, for schedulers configured with 'proportion' (default: %(default)s)")
    p.add_argument("--deserved", action="append", metavar="RESOURCE=QUANTITY",
                   help="the queue's share, taken back from other queues when it has gangs waiting, "
                        "e.g. cpu=6; repeatable")
    p.add_argument("--capability", action="append", metavar="RESOURCE=QUANTITY",
                   help="hard cap on what the queue's gangs hold; repeatable")
    p.add_argument("--guarantee", action="append", metavar="RESOURCE=QUANTITY",
                   help="never reclaimed from this queue (needs --deserved at least as large); repeatable")
    p.add_argument("--reclaimable", action=argparse.BooleanOptionalAction, default=True,
                   help="may other queues take back what it holds above --deserved (default: yes)")
    p.add_argument("--priority", type=int, default=0,
                   help="queue priority: served before lower ones whatever the shares (default: %(default)s)")
    p.add_argument("--check-crd", default=None, metavar="CRD_YAML",
                   help="also validate against this Volcano CRD file (scheduling.volcano.sh_queues.yaml)")
    p.add_argument("--output", "-o", default="yaml", choices=("yaml", "json"))
    p.set_defaults(func=render_queue)

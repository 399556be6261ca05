"""Run the product's :class:`VolcanoLauncher` as its own process (as a KFP step pod would).

Used by the cancel and re-attach scenarios, which signal or kill the launcher process. Input is one
JSON object on the command line: ``{"kubeconfig": ..., "spec": {TrainJobSpec fields}, "poll_s": ...}``
with ``pserver_resources``/``trainer_resources`` given as ``Resources`` field dicts. Exit code: 0 on
success, 3 when cancelled, 4 when the job failed (any error family: a failed job, a role that refused
its input, an outage); every launcher line goes to stdout.
"""
from __future__ import annotations

import json
import sys


def main(argv=None) -> int:
    from ctr_volcano.errors import CtrError
    from ctr_volcano.training.volcano.client import KubeClient
    from ctr_volcano.training.volcano.launcher import JobCancelled, VolcanoLauncher
    from ctr_volcano.training.volcano.spec import Resources, TrainJobSpec

    args = json.loads((argv or sys.argv[1:])[0])
    fields = dict(args["spec"])
    for key in ("pserver_resources", "trainer_resources"):
        if key in fields:
            fields[key] = Resources(**fields[key])
    spec = TrainJobSpec(**fields)
    client = KubeClient.from_kubeconfig(args["kubeconfig"])

    def log(line: str) -> None:
        print(line, flush=True)

    launcher = VolcanoLauncher(client, spec, log=log, poll_s=args.get("poll_s", 0.3),
                               explain_every_s=args.get("explain_every_s", 2.0))
    try:
        result = launcher.run()
    except JobCancelled as exc:
        print(f"DRIVER: cancelled: {exc}", flush=True)
        return 3
    except CtrError as exc:
        print(f"DRIVER: failed: {exc}", flush=True)
        return 4
    finally:
        client.close()
    print(f"DRIVER: result {result}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The reachability check of a shared directory for a non-root user (``ctr_model.reach``), and the
two places that use it: ``ctr-volcano minicluster up`` refuses a workdir the gang cannot reach, and a
Volcano Job whose role exits with the bad-input code is terminated, not restarted, and fails the step
with the role's one error line."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ctr_model.contract import EXIT_BAD_INPUT
from ctr_model.reach import first_blocker
from ctr_volcano.app.cli.cluster import check_workdir_reachable
from ctr_volcano.errors import BadInput
from ctr_volcano.training.volcano.manifest import build_job, check_job
from ctr_volcano.training.volcano.spec import TrainJobSpec


def _fake_stat(tree):
    """``os.stat`` over a recorded tree ``{path: (mode, uid, gid)}``; other paths are missing."""
    def fake(path):
        if path not in tree:
            raise FileNotFoundError(path)
        mode, uid, gid = tree[path]
        return os.stat_result((stat.S_IFDIR | mode, 0, 0, 0, uid, gid, 0, 0, 0, 0))
    return fake


TREE = {"/": (0o755, 0, 0), "/root": (0o700, 0, 0), "/root/work": (0o755, 0, 0),
        "/tmp": (0o1777, 0, 0), "/tmp/tmp.x1": (0o700, 0, 0), "/srv": (0o750, 0, 50),
        "/srv/data": (0o755, 1000, 1000), "/var": (0o755, 0, 0), "/var/tmp": (0o1777, 0, 0)}


@pytest.mark.parametrize("path, uid, gids, write, blocked, needs", [
    ("/root/work/ctr-data", 1000, (1000,), True, "/root", "traverse"),      # under root's home
    ("/tmp/tmp.x1/cluster", 1000, (1000,), False, "/tmp/tmp.x1", "traverse"),  # a mktemp -d
    ("/srv/data", 1000, (1000,), True, "/srv", "traverse"),                  # not in group 50
    ("/srv/data", 1000, (1000, 50), True, None, None),                       # in group 50: through
    ("/var/tmp/new/deeper", 1000, (1000,), True, None, None),                 # created below /var/tmp
    ("/root/work", 1000, (1000,), False, "/root", "traverse"),
    ("/", 1000, (1000,), True, "/", "write"),                                # traverse yes, write no
    ("/root/work/ctr-data", 0, (0,), True, None, None),                      # root passes everywhere
    ("/srv/data", 1000, (1000,), False, "/srv", "traverse"),
])
def test_first_blocker_on_recorded_trees(path, uid, gids, write, blocked, needs):
    got = first_blocker(path, uid, gids, write=write, stat=_fake_stat(TREE))
    assert (got.path if got else None, got.needs if got else None) == (blocked, needs)


def test_blocker_describes_mode_owner_and_what_is_missing():
    got = first_blocker("/root/work", 1000, (1000,), stat=_fake_stat(TREE))
    assert got.describe(1000) == "/root (mode 0700, owner 0:0) does not let uid 1000 traverse"


def test_first_blocker_on_a_real_tree(tmp_path):
    locked = tmp_path / "locked"
    (locked / "inner").mkdir(parents=True)
    tmp_path.chmod(0o755)
    locked.chmod(0o700)
    got = first_blocker(str(locked / "inner" / "out"), 1000, (1000,))
    if tmp_path.parent.stat().st_mode & 0o001 == 0:   # pytest's own base may already stop uid 1000
        assert got is not None and got.needs == "traverse"
    else:
        assert got is not None and got.path == str(locked)
    locked.chmod(0o755)


def test_minicluster_up_refuses_a_workdir_the_gang_cannot_reach():
    with pytest.raises(BadInput) as exc:
        check_workdir_reachable(Path("/root/work"), stat=_fake_stat(TREE))
    msg = str(exc.value)
    assert msg.startswith("--workdir='/root/work'") and "/root (mode 0700" in msg and "/var/tmp" in msg
    check_workdir_reachable(Path("/var/tmp/mc"), stat=_fake_stat(TREE))  # fine


def test_minicluster_up_cli_exits_2_before_building(tmp_path):
    from ctr_volcano.app.cli.main import main

    base = tmp_path / "private"
    base.mkdir()
    base.chmod(0o700)
    code = main(["minicluster", "up", "--process-nodes", "1", "--workdir", str(base / "mc")])
    assert code == 2
    assert not (base / "mc").exists()   # refused before anything was created or built


def test_bad_input_exit_code_terminates_the_job_instead_of_restarting_it(tmp_path):
    spec = TrainJobSpec(name="j", namespace="ns", image="img:1", data_dir=str(tmp_path / "d"),
                        output_dir=str(tmp_path / "o"), pservers=1, trainers=1)
    job = build_job(spec)
    check_job(job)
    policies = job["spec"]["policies"]
    # Volcano applies the first policy that matches; PodFailed would match a bad-input exit too
    assert policies[0] == {"exitCode": EXIT_BAD_INPUT, "action": "TerminateJob"}
    assert {"event": "PodFailed", "action": "RestartJob"} in policies[1:]

"""Item 4 of the process-node work, as a user with a cluster would do it, from the command line:

    ctr-volcano minicluster up --process-nodes 2          # prints KUBECONFIG and the claim's dir
    ctr-volcano train --backend volcano --kubeconfig K --namespace default --pvc-name ctr-data \\
        --pvc-mount-path DIR --data PREP --model-out OUT
    ctr-volcano evaluate --model OUT --data PREP --out EVAL

Its own cluster (the verb starts one), stopped with Ctrl-C (SIGINT) at the end; nothing may be left.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import built_images
from tests.cluster.helpers import assert_trained, ctr_volcano_cli

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]


def test_minicluster_up_with_process_nodes_then_train_and_evaluate(minicluster_bin, planted, tmp_path):
    built_images()   # the verb's process nodes run the trainer image: skipped where it cannot be built
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # outside pytest's 0700 tmp dirs: the pods (UID 1000) reach the claim under the workdir
    workdir = Path(tempfile.mkdtemp(prefix="ctr-minicluster-cli-"))
    up = subprocess.Popen([sys.executable, "-m", "ctr_volcano.app.cli.main", "minicluster", "up",
                           "--process-nodes", "2", "--workdir", str(workdir)],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, start_new_session=True)
    out = []
    try:
        deadline = time.monotonic() + 300
        while not any(line.startswith("CLAIM_DIR=") for line in out):
            line = up.stdout.readline()
            assert line or up.poll() is None, "minicluster up exited:\n" + "".join(out)
            out.append(line)
            assert time.monotonic() < deadline, "minicluster up not ready after 300s:\n" + "".join(out)
        text = "".join(out)
        kubeconfig = re.search(r"^export KUBECONFIG=(\S+)$", text, re.M).group(1)
        claim_dir = re.search(r"^CLAIM_DIR=(\S+)$", text, re.M).group(1)
        assert Path(kubeconfig).is_file() and Path(claim_dir).is_dir()

        train = ctr_volcano_cli("train", "--backend", "volcano", "--kubeconfig", kubeconfig,
                                "--namespace", "default", "--pvc-name", "ctr-data",
                                "--pvc-mount-path", claim_dir, "--data", str(planted["prep"]),
                                "--model-out", str(tmp_path / "model"), "--epochs", "3", "--lr", "0.002",
                                "--cpu", "1", "--memory", "1Gi", "--poll", "1", timeout=900)
        assert "[trainer-0]" in train.stdout + train.stderr
        ctr_volcano_cli("evaluate", "--model", str(tmp_path / "model"), "--data", str(planted["prep"]),
                        "--out", str(tmp_path / "eval"))
        auc = json.loads((tmp_path / "eval" / "metrics.json").read_text())["auc"]
        print(f"\nCLI on process nodes: test AUC {auc:.4f}, oracle {planted['oracle_auc']:.4f}")
        assert_trained(auc, planted["oracle_auc"])
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGINT)
        rest, _ = up.communicate(timeout=120)
    assert up.returncode == 0, "".join(out) + rest
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    agent_log = (workdir / "logs" / "nodeagent.log").read_text()
    assert "every pod process and namespace removed" in agent_log, agent_log[-2000:]
    prefix = re.search(r"bridge namespace (\S+)-br", agent_log).group(1)
    assert prefix not in left, left
    shutil.rmtree(workdir, ignore_errors=True)

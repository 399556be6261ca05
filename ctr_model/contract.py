"""The environment contract between a launcher (Volcano or local) and the pod entrypoint.

One contract feeds both backends, so a local run exercises exactly the production entrypoint:

* **Volcano's own variables** (given by its plugins, never by us on a cluster):
  ``VC_TASK_INDEX``/``VK_TASK_INDEX`` (env plugin), ``VC_<TASK>_HOSTS``, ``VC_<TASK>_NUM`` and the
  files ``/etc/volcano/<task>.host`` (svc plugin; one host name per line, no ports).
  :func:`volcano_plugin_env` reproduces them for the local backend.
* **The product's variables** (``CTR_*``), set by the launcher in each task's pod template:
  :func:`role_env`. They carry what Volcano cannot know: the role, ports, the data/output paths and the
  training config.

Task names are the role names, ``pserver`` and ``trainer``, so the svc plugin's variables are
``VC_PSERVER_HOSTS`` and ``VC_TRAINER_HOSTS``.

Ports: on Volcano every pod has its own IP, so all pservers listen on ``CTR_PS_PORT``
(``CTR_PS_PORT_STRIDE=0``). The local backend runs every role on 127.0.0.1, so pserver ``i`` listens on
``CTR_PS_PORT + i * CTR_PS_PORT_STRIDE`` with a stride of 1 and a block of free ports.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Sequence

__all__ = [
    "PSERVER", "TRAINER", "ROLES", "DEFAULT_VOLCANO_DIR",
    "ENV_ROLE", "ENV_PS_PORT", "ENV_PS_PORT_STRIDE", "ENV_GLOO_PORT", "ENV_DATA_DIR",
    "ENV_OUTPUT_DIR", "ENV_TRAIN_CONFIG", "ENV_JOB_ID", "ENV_VOLCANO_DIR", "ENV_PSERVERS",
    "ENV_TRAINERS",
    "GangContract", "role_env", "volcano_plugin_env", "host_file_contents",
]

PSERVER = "pserver"
TRAINER = "trainer"
ROLES = (PSERVER, TRAINER)

#: Where Volcano's svc plugin mounts the host files.
DEFAULT_VOLCANO_DIR = "/etc/volcano"

ENV_ROLE = "CTR_ROLE"                      # pserver | trainer
ENV_PSERVERS = "CTR_PSERVERS"              # expected number of pservers (cross-checked with VC_PSERVER_NUM)
ENV_TRAINERS = "CTR_TRAINERS"              # expected number of trainers (cross-checked with VC_TRAINER_NUM)
ENV_PS_PORT = "CTR_PS_PORT"                # base port of the pservers
ENV_PS_PORT_STRIDE = "CTR_PS_PORT_STRIDE"  # 0 on Volcano (own IP per pod), 1 locally
ENV_GLOO_PORT = "CTR_GLOO_PORT"            # HTTP rendezvous port served by pserver 0
ENV_DATA_DIR = "CTR_DATA_DIR"              # prep output (DIR/train/*.parquet, DIR/stats.json); shared
ENV_OUTPUT_DIR = "CTR_OUTPUT_DIR"          # checkpoints, exported model, metrics; shared storage
ENV_TRAIN_CONFIG = "CTR_TRAIN_CONFIG"      # TrainConfig as a JSON object (the --config file wins)
ENV_JOB_ID = "CTR_JOB_ID"                  # gang identity (Volcano Job name / local gang id)
ENV_VOLCANO_DIR = "CTR_VOLCANO_DIR"        # host-file dir; default /etc/volcano (local backend overrides)


@dataclass(frozen=True)
class GangContract:
    """What every pod of one training gang is told by its launcher.

    Attributes:
        job_id: gang identity; the Volcano Job name on a cluster.
        pservers: number of parameter servers (the ``pserver`` task's replicas).
        trainers: number of trainers (the ``trainer`` task's replicas).
        data_dir: prep output directory, readable by every trainer (shared storage on a cluster).
        output_dir: where checkpoints and the exported model go; must be shared by every role because
            each pserver writes its own part of the sparse table there.
        ps_port: port of pserver 0 (of every pserver when ``ps_port_stride`` is 0).
        ps_port_stride: 0 on Volcano; 1 when all pservers share one host (local backend).
        gloo_port: Paddle's Gloo HTTP rendezvous port, served by pserver 0.
        train_config: the training config as a plain JSON-able dict (``ctr_model`` validates it).
        volcano_dir: where the svc plugin's host files are; ``None`` means Volcano's default.
    """

    job_id: str
    pservers: int
    trainers: int
    data_dir: str
    output_dir: str
    ps_port: int = 36001
    ps_port_stride: int = 0
    gloo_port: int = 36100
    train_config: Mapping[str, object] = field(default_factory=dict)
    volcano_dir: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.job_id:
            raise ValueError("GangContract.job_id is empty: give the gang a name")
        for name in ("pservers", "trainers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"GangContract.{name}={value!r}: must be an integer >= 1")
        for name in ("ps_port", "gloo_port"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= 65535:
                raise ValueError(f"GangContract.{name}={value!r}: must be a TCP port in 1..65535")
        if self.ps_port_stride not in (0, 1):
            raise ValueError(f"GangContract.ps_port_stride={self.ps_port_stride!r}: must be 0 or 1")
        if not self.data_dir or not self.output_dir:
            raise ValueError("GangContract.data_dir and output_dir must both be set")


def role_env(contract: GangContract, role: str) -> Dict[str, str]:
    """The product's variables for every pod of ``role`` (index-independent: it comes from Volcano).

    The Volcano backend puts these in the task's pod template; the local backend passes them to each
    process together with :func:`volcano_plugin_env`.
    """
    if role not in ROLES:
        raise ValueError(f"role={role!r}: must be one of {', '.join(ROLES)}")
    env = {
        ENV_ROLE: role,
        ENV_JOB_ID: contract.job_id,
        ENV_PSERVERS: str(contract.pservers),
        ENV_TRAINERS: str(contract.trainers),
        ENV_PS_PORT: str(contract.ps_port),
        ENV_PS_PORT_STRIDE: str(contract.ps_port_stride),
        ENV_GLOO_PORT: str(contract.gloo_port),
        ENV_DATA_DIR: contract.data_dir,
        ENV_OUTPUT_DIR: contract.output_dir,
        ENV_TRAIN_CONFIG: json.dumps(dict(contract.train_config), sort_keys=True),
    }
    if contract.volcano_dir:
        env[ENV_VOLCANO_DIR] = contract.volcano_dir
    return env


def host_file_contents(hosts: Sequence[str]) -> str:
    """Text of ``/etc/volcano/<task>.host`` as the svc plugin writes it: one host per line."""
    return "".join(f"{h}\n" for h in hosts)


def volcano_plugin_env(role: str, index: int, hosts: Mapping[str, Sequence[str]]) -> Dict[str, str]:
    """Volcano's env + svc plugin variables for pod ``index`` of task ``role`` (local emulation).

    Args:
        role: the task name (``pserver`` or ``trainer``).
        index: the pod's index within its task.
        hosts: host names per task name, in index order, for every task of the job.
    """
    if role not in hosts:
        raise ValueError(f"role={role!r} is not a task of this gang ({', '.join(hosts)})")
    if not 0 <= index < len(hosts[role]):
        raise ValueError(f"index={index} out of range for task {role!r} with {len(hosts[role])} pods")
    env = {"VC_TASK_INDEX": str(index), "VK_TASK_INDEX": str(index)}
    for task, task_hosts in hosts.items():
        key = task.upper().replace("-", "_")
        env[f"VC_{key}_HOSTS"] = ",".join(task_hosts)
        env[f"VC_{key}_NUM"] = str(len(task_hosts))
    return env

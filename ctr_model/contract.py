"""The environment contract between a launcher (Volcano or local) and the pod entrypoint.

One contract feeds both backends, so a local run exercises exactly the production entrypoint:

* **Volcano's own variables** (given by its plugins, never by us on a cluster):
  ``VC_TASK_INDEX``/``VK_TASK_INDEX`` (env plugin), ``VC_<TASK>_HOSTS``, ``VC_<TASK>_NUM`` and the
  files ``/etc/volcano/<task>.host`` (svc plugin; one host name per line, no ports).
  :func:`volcano_plugin_env` reproduces them for the local backend.
* **The product's variables** (``CTR_*``), set by the launcher in each task's pod template:
  :func:`role_env`. They carry what Volcano cannot know: the role, ports, the data/output paths and the
  training config; the backends add where a role's local disk is (``CTR_SCRATCH_DIR``,
  ``CTR_CACHE_DIR``) and the object store's settings (:mod:`ctr_model.store_config`).

In the pod, :func:`parse_role_env` is the one reader of all of them (the store's through
:meth:`~ctr_model.store_config.StoreConfig.from_env` on the same environment): the role's modules get
a :class:`RoleSpec` and read no variable themselves.

Task names are the role names, ``pserver`` and ``trainer``, so the svc plugin's variables are
``VC_PSERVER_HOSTS`` and ``VC_TRAINER_HOSTS``.

Ports: on Volcano every pod has its own IP, so all pservers listen on ``CTR_PS_PORT``
(``CTR_PS_PORT_STRIDE=0``). The local backend runs every role on 127.0.0.1, so pserver ``i`` listens on
``CTR_PS_PORT + i * CTR_PS_PORT_STRIDE`` with a stride of 1 and a block of free ports.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ctr_model.defaults import DEFAULT_GLOO_PORT, DEFAULT_PS_PORT
from ctr_model.errors import EXIT_BAD_INPUT, BadInput
from ctr_model.store_config import StoreConfig, StoreError, is_uri

__all__ = [
    "PSERVER", "TRAINER", "ROLES", "DEFAULT_VOLCANO_DIR",
    "ENV_ROLE", "ENV_PS_PORT", "ENV_PS_PORT_STRIDE", "ENV_GLOO_PORT", "ENV_DATA_DIR",
    "ENV_OUTPUT_DIR", "ENV_TRAIN_CONFIG", "ENV_JOB_ID", "ENV_VOLCANO_DIR", "ENV_PSERVERS",
    "ENV_TRAINERS", "ENV_INIT_MODEL", "ENV_DNS_WAIT", "ENV_PUBLISH_TIMEOUT", "ENV_PSERVER_WAIT", "ENV_SCRATCH_DIR",
    "ENV_CACHE_DIR", "EXIT_BAD_INPUT",
    "GangContract", "role_env", "volcano_plugin_env", "host_file_contents",
    "ContractError", "RoleSpec", "parse_role_env", "paddle_env",
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
ENV_INIT_MODEL = "CTR_INIT_MODEL"          # optional: exported model to warm-start from (shared storage)
ENV_DNS_WAIT = "CTR_DNS_WAIT_S"            # optional: seconds to wait for host names (default 120)
ENV_PUBLISH_TIMEOUT = "CTR_PUBLISH_TIMEOUT_S"  # optional: trainer 0's wait for the pservers' uploads (600)
ENV_PSERVER_WAIT = "CTR_PSERVER_WAIT_S"    # optional: a trainer's wait for the pservers to serve (600)
ENV_SCRATCH_DIR = "CTR_SCRATCH_DIR"        # optional: local scratch of object-store runs (default: temp dir)
ENV_CACHE_DIR = "CTR_CACHE_DIR"            # optional: trainers' slot-text cache (default: temp dir)


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
        init_model: an exported model directory (with ``warm_start/``) the pservers load before the
            first epoch; shared storage, because the pservers read it. ``None`` trains from scratch.
    """

    job_id: str
    pservers: int
    trainers: int
    data_dir: str
    output_dir: str
    ps_port: int = DEFAULT_PS_PORT
    ps_port_stride: int = 0
    gloo_port: int = DEFAULT_GLOO_PORT
    train_config: Mapping[str, object] = field(default_factory=dict)
    volcano_dir: Optional[str] = None
    init_model: Optional[str] = None

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
    if contract.init_model:
        env[ENV_INIT_MODEL] = contract.init_model
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


# ------------------------------------------------------------------------------------------------
# The pod side: parse and validate the contract in one place, then derive Paddle's variables.
# ------------------------------------------------------------------------------------------------

class ContractError(BadInput):
    """The pod's environment does not satisfy the contract (bad input): ``field`` is
    ``environment``, ``value`` the offending variables, and the fix lists what each lacks."""

    def __init__(self, missing: Sequence[str], bad: Sequence[str]):
        parts = []
        if missing:
            parts.append("missing: " + "; ".join(missing))
        if bad:
            parts.append("invalid: " + "; ".join(bad))
        names = [m.group() for m in (re.match(r"[A-Z][A-Z0-9_]*", p) for p in [*missing, *bad]) if m]
        super().__init__("environment", names,
                         "the pod's environment is half-configured, refusing to start (" + " | ".join(parts)
                         + "). Launch it through ctr-volcano (local or Volcano backend), which sets the "
                         "whole contract.")


def _default_cache_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"ctr-slots-{os.getuid()}")


@dataclass(frozen=True)
class RoleSpec:
    """Everything one pod knows about itself and its gang, parsed from the environment.

    Attributes:
        role: ``pserver`` or ``trainer``.
        index: this pod's index within its task (from ``VC_TASK_INDEX``).
        job_id: gang identity.
        pserver_hosts: host names of the pservers, in index order.
        trainer_hosts: host names of the trainers, in index order.
        ps_port: base pserver port; ``ps_port_stride`` spaces pservers sharing one host.
        ps_port_stride: 0 (one host per pserver) or 1 (local backend).
        gloo_port: Gloo HTTP rendezvous port on pserver 0.
        data_dir: prep output or split directory.
        output_dir: shared output directory.
        train_config_json: the raw training config JSON (validated by ``TrainConfig``).
        init_model: exported model to warm-start from; ``""`` trains from scratch.
        dns_wait_s: how long a role waits for its own and pserver 0's host names to resolve
            (``CTR_DNS_WAIT_S``; the svc plugin's headless Service publishes them a little after the
            pod starts, and Paddle, given a name that does not resolve yet, exits 0 as if done).
        publish_timeout_s: how long trainer 0 waits for the pservers to upload what they saved, in
            the object-store hand-off (``CTR_PUBLISH_TIMEOUT_S``).
        pserver_wait_s: how long a trainer waits for pserver 0's rendezvous server and for every
            pserver to accept connections before it fails (``CTR_PSERVER_WAIT_S``).
        scratch_dir: where a role of an object-store run makes its own working directory
            (``CTR_SCRATCH_DIR``: an emptyDir on a cluster; default the temp directory).
        cache_dir: where a trainer converts its shards to slot text (``CTR_CACHE_DIR``; default
            ``ctr-slots-<uid>`` in the temp directory).
        store: the object store's settings (:meth:`ctr_model.store.StoreConfig.from_env`, read from
            the same environment) when the data, the output or the init model is an ``s3://`` URI.
    """

    role: str
    index: int
    job_id: str
    pserver_hosts: Tuple[str, ...]
    trainer_hosts: Tuple[str, ...]
    ps_port: int
    ps_port_stride: int
    gloo_port: int
    data_dir: str
    output_dir: str
    train_config_json: str = "{}"
    init_model: str = ""
    dns_wait_s: float = 120.0
    publish_timeout_s: float = 600.0
    pserver_wait_s: float = 600.0
    scratch_dir: str = field(default_factory=tempfile.gettempdir)
    cache_dir: str = field(default_factory=_default_cache_dir)
    store: Optional[StoreConfig] = None

    @property
    def pservers(self) -> int:
        return len(self.pserver_hosts)

    @property
    def trainers(self) -> int:
        return len(self.trainer_hosts)

    def ps_endpoints(self) -> List[str]:
        """``host:port`` of every pserver, in index order (Paddle's pserver list)."""
        return [f"{h}:{self.ps_port + i * self.ps_port_stride}" for i, h in enumerate(self.pserver_hosts)]

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


def _store_config(env: Mapping[str, str], locations: Sequence[str], bad: List[str]) -> Optional[StoreConfig]:
    """The object store's settings when one of ``locations`` is in it (``None`` otherwise)."""
    if not any(is_uri(loc) for loc in locations):
        return None
    try:
        return StoreConfig.from_env(env)
    except StoreError as exc:
        bad.append(str(exc))
        return None


def _read_hosts(task: str, env: Mapping[str, str], missing: List[str]) -> Tuple[str, ...]:
    key = task.upper().replace("-", "_")
    text = env.get(f"VC_{key}_HOSTS", "")
    if text.strip():
        return tuple(h.strip() for h in text.split(",") if h.strip())
    vdir = env.get(ENV_VOLCANO_DIR) or DEFAULT_VOLCANO_DIR
    path = os.path.join(vdir, f"{task.replace('-', '_')}.host")
    try:
        with open(path, encoding="utf-8") as fh:
            hosts = tuple(line.strip() for line in fh if line.strip())
    except OSError:
        hosts = ()
    if not hosts:
        missing.append(f"VC_{key}_HOSTS (or the file {path}; Volcano's svc plugin provides both)")
    return hosts


def _int_var(env: Mapping[str, str], name: str, missing: List[str], bad: List[str],
             low: int = 0, high: int = 1 << 31) -> int:
    text = env.get(name, "").strip()
    if not text:
        missing.append(name)
        return -1
    try:
        value = int(text)
    except ValueError:
        bad.append(f"{name}={text!r} is not an integer")
        return -1
    if not low <= value <= high:
        bad.append(f"{name}={value} must be in {low}..{high}")
    return value


def _seconds_var(env: Mapping[str, str], name: str, default: float, bad: List[str]) -> float:
    """An optional positive number of seconds; ``default`` when unset."""
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        bad.append(f"{name}={text!r} must be a positive number of seconds")
        return default
    return value


def _cross_check(env: Mapping[str, str], role: str, index: int, pserver_hosts: Tuple[str, ...],
                 trainer_hosts: Tuple[str, ...], ps_port: int, stride: int, bad: List[str]) -> None:
    """What the launcher said against what Volcano says: replica counts, the index, shared hosts."""
    for count_var, hosts, task in ((ENV_PSERVERS, pserver_hosts, PSERVER),
                                   (ENV_TRAINERS, trainer_hosts, TRAINER)):
        expected = env.get(count_var, "").strip()
        if expected and hosts and expected != str(len(hosts)):
            bad.append(f"{count_var}={expected} but Volcano lists {len(hosts)} {task} host(s): "
                       f"the Job's {task} replicas and the launcher disagree")
    for task, hosts in ((PSERVER, pserver_hosts), (TRAINER, trainer_hosts)):
        num_var = f"VC_{task.upper()}_NUM"   # the svc plugin's replica count of the task
        num = env.get(num_var, "").strip()
        if num and hosts and num != str(len(hosts)):
            bad.append(f"{num_var}={num} but Volcano lists {len(hosts)} {task} host(s)")
    if role in ROLES and index >= 0:
        hosts = pserver_hosts if role == PSERVER else trainer_hosts
        if hosts and index >= len(hosts):
            bad.append(f"VC_TASK_INDEX={index} but task {role!r} has only {len(hosts)} host(s)")
    if ps_port > 0 and stride == 0 and len(set(pserver_hosts)) != len(pserver_hosts):
        bad.append(f"pserver hosts repeat ({','.join(pserver_hosts)}) with {ENV_PS_PORT_STRIDE}=0: "
                   f"set {ENV_PS_PORT_STRIDE}=1 when pservers share a host")


def parse_role_env(environ: Optional[Mapping[str, str]] = None) -> RoleSpec:
    """Parse and cross-check this pod's contract; refuse to run half-configured.

    Role and index come only from ``CTR_ROLE`` and Volcano's ``VC_TASK_INDEX`` (``VK_TASK_INDEX`` as
    a fallback); peers only from Volcano's svc plugin.

    Raises:
        ContractError: listing every missing or inconsistent variable and how to fix it.
    """
    env = os.environ if environ is None else environ
    missing: List[str] = []
    bad: List[str] = []
    role = env.get(ENV_ROLE, "").strip()
    if not role:
        missing.append(f"{ENV_ROLE} (one of {', '.join(ROLES)})")
    elif role not in ROLES:
        bad.append(f"{ENV_ROLE}={role!r} must be one of {', '.join(ROLES)}")
    index_var = "VC_TASK_INDEX" if env.get("VC_TASK_INDEX", "").strip() else "VK_TASK_INDEX"
    if not env.get(index_var, "").strip():
        missing.append("VC_TASK_INDEX (Volcano's env plugin sets it: add plugins: {env: []} to the Job)")
        index = -1
    else:
        index = _int_var(env, index_var, missing, bad)
    pserver_hosts = _read_hosts(PSERVER, env, missing)
    trainer_hosts = _read_hosts(TRAINER, env, missing)
    job_id = env.get(ENV_JOB_ID, "").strip()
    if not job_id:
        missing.append(ENV_JOB_ID)
    ps_port = _int_var(env, ENV_PS_PORT, missing, bad, 1, 65535)
    stride = _int_var(env, ENV_PS_PORT_STRIDE, [], bad, 0, 1) if env.get(ENV_PS_PORT_STRIDE) else 0
    gloo_port = _int_var(env, ENV_GLOO_PORT, missing, bad, 1, 65535)
    data_dir = env.get(ENV_DATA_DIR, "").strip()
    output_dir = env.get(ENV_OUTPUT_DIR, "").strip()
    if not output_dir:
        missing.append(f"{ENV_OUTPUT_DIR} (shared by every role)")
    if role == TRAINER and not data_dir:
        missing.append(f"{ENV_DATA_DIR} (the prep output)")
    _cross_check(env, role, index, pserver_hosts, trainer_hosts, ps_port, stride, bad)
    dns_wait_s = _seconds_var(env, ENV_DNS_WAIT, 120.0, bad)
    publish_timeout_s = _seconds_var(env, ENV_PUBLISH_TIMEOUT, 600.0, bad)
    pserver_wait_s = _seconds_var(env, ENV_PSERVER_WAIT, 600.0, bad)
    init_model = env.get(ENV_INIT_MODEL, "").strip()
    store = _store_config(env, (data_dir, output_dir, init_model), bad)
    if missing or bad:
        raise ContractError(missing, bad)
    return RoleSpec(role=role, index=index, job_id=job_id, pserver_hosts=pserver_hosts,
                    trainer_hosts=trainer_hosts, ps_port=ps_port, ps_port_stride=stride,
                    gloo_port=gloo_port, data_dir=data_dir, output_dir=output_dir,
                    train_config_json=env.get(ENV_TRAIN_CONFIG, "") or "{}",
                    init_model=init_model, dns_wait_s=dns_wait_s, publish_timeout_s=publish_timeout_s,
                    pserver_wait_s=pserver_wait_s,
                    scratch_dir=env.get(ENV_SCRATCH_DIR, "").strip() or tempfile.gettempdir(),
                    cache_dir=env.get(ENV_CACHE_DIR, "").strip() or _default_cache_dir(), store=store)


def paddle_env(spec: RoleSpec) -> Dict[str, str]:
    """Paddle's parameter-server variables for this pod, derived in one place.

    Gloo (HTTP rendezvous served by pserver 0) is always on for trainers, because without it Paddle's
    barriers are silent no-ops and the clean-shutdown sequence would race. Pservers never join the
    Gloo group; pserver 0 serves the rendezvous store itself (:mod:`ctr_model.rendezvous`), so Paddle
    runs with Gloo off there and does not start its own.
    """
    endpoints = spec.ps_endpoints()
    env = {
        "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(endpoints),
        "PADDLE_TRAINERS_NUM": str(spec.trainers),
        "PADDLE_WITH_GLOO": "1",
        "PADDLE_GLOO_RENDEZVOUS": "3",
        "PADDLE_GLOO_HTTP_ENDPOINT": f"{spec.pserver_hosts[0]}:{spec.gloo_port}",
        "SYS_JOB_ID": spec.job_id,
        "FLAGS_LAUNCH_BARRIER": "1",
    }
    if spec.role == PSERVER:
        host, port = endpoints[spec.index].rsplit(":", 1)
        env.update(TRAINING_ROLE="PSERVER", POD_IP=host, PADDLE_PORT=port, PADDLE_WITH_GLOO="0")
    else:
        env.update(TRAINING_ROLE="TRAINER", POD_IP=spec.trainer_hosts[spec.index],
                   PADDLE_PORT=str(spec.ps_port), PADDLE_TRAINER_ID=str(spec.index))
    return env

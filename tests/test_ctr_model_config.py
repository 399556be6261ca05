"""TrainConfig validation and the pod-side contract parser (pure logic, no processes)."""
from __future__ import annotations

import json

import pytest

from ctr_model.config import ConfigError, TrainConfig
from ctr_model.contract import ContractError, GangContract, paddle_env, parse_role_env, role_env, volcano_plugin_env


def test_config_round_trip_and_defaults():
    cfg = TrainConfig()
    again = TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    assert TrainConfig.from_dict({"fc_sizes": [8, 4]}).fc_sizes == (8, 4)


@pytest.mark.parametrize("field,value", [
    ("epochs", 0), ("batch_size", -1), ("learning_rate", 0), ("fc_sizes", []),
    ("fc_sizes", [8, 0]), ("optimizer", "rmsprop"), ("reader", "python"), ("threads", True),
    ("checkpoint_secs", -1), ("checkpoint_secs", "600"), ("checkpoint_secs", 10 ** 9),
])
def test_config_errors_name_field_value_and_fix(field, value):
    with pytest.raises(ConfigError) as err:
        TrainConfig.from_dict({field: value})
    assert err.value.field == f"config.{field}"   # a BadInput: the CLI maps it to its flag
    shown = tuple(value) if isinstance(value, list) else value
    assert field in str(err.value) and repr(shown) in str(err.value)
    assert "use" in err.value.fix


def test_config_refuses_unknown_keys():
    with pytest.raises(ConfigError, match="unknown field"):
        TrainConfig.from_dict({"epoch": 3})


def _pod_env(role: str, index: int, tmp_path, pservers=2, trainers=2, with_files=False):
    contract = GangContract(job_id="j", pservers=pservers, trainers=trainers, data_dir="/d",
                            output_dir="/o", ps_port=7000, ps_port_stride=0, gloo_port=7100,
                            volcano_dir=str(tmp_path))
    hosts = {"pserver": [f"j-pserver-{i}.j" for i in range(pservers)],
             "trainer": [f"j-trainer-{i}.j" for i in range(trainers)]}
    env = dict(role_env(contract, role))
    plugin = volcano_plugin_env(role, index, hosts)
    if with_files:   # only the svc plugin's files, not its variables
        for task, names in hosts.items():
            (tmp_path / f"{task}.host").write_text("".join(f"{h}\n" for h in names))
        plugin = {k: v for k, v in plugin.items() if "HOSTS" not in k}
    env.update(plugin)
    return env


@pytest.mark.parametrize("with_files", [False, True])
def test_parse_role_env_pserver_and_trainer(tmp_path, with_files):
    spec = parse_role_env(_pod_env("pserver", 1, tmp_path, with_files=with_files))
    assert (spec.role, spec.index, spec.pservers, spec.trainers) == ("pserver", 1, 2, 2)
    penv = paddle_env(spec)
    assert penv["PADDLE_PSERVERS_IP_PORT_LIST"] == "j-pserver-0.j:7000,j-pserver-1.j:7000"
    assert (penv["TRAINING_ROLE"], penv["POD_IP"], penv["PADDLE_PORT"]) == ("PSERVER", "j-pserver-1.j", "7000")
    assert f"{penv['POD_IP']}:{penv['PADDLE_PORT']}" in penv["PADDLE_PSERVERS_IP_PORT_LIST"].split(",")
    assert penv["PADDLE_WITH_GLOO"] == "0"         # pserver 0 serves the rendezvous itself
    tenv = paddle_env(parse_role_env(_pod_env("trainer", 0, tmp_path, with_files=with_files)))
    assert tenv["PADDLE_WITH_GLOO"] == "1" and tenv["PADDLE_GLOO_HTTP_ENDPOINT"] == "j-pserver-0.j:7100"
    assert (tenv["TRAINING_ROLE"], tenv["PADDLE_TRAINER_ID"], tenv["PADDLE_TRAINERS_NUM"]) == ("TRAINER", "0", "2")


def test_local_stride_gives_distinct_ports(tmp_path):
    env = _pod_env("pserver", 1, tmp_path)
    env.update({"VC_PSERVER_HOSTS": "127.0.0.1,127.0.0.1", "CTR_PS_PORT_STRIDE": "1"})
    assert paddle_env(parse_role_env(env))["PADDLE_PORT"] == "7001"
    env["CTR_PS_PORT_STRIDE"] = "0"
    with pytest.raises(ContractError, match="CTR_PS_PORT_STRIDE=1"):
        parse_role_env(env)


@pytest.mark.parametrize("drop,needle", [
    ("VC_TASK_INDEX", "VC_TASK_INDEX"), ("CTR_ROLE", "CTR_ROLE"), ("CTR_OUTPUT_DIR", "CTR_OUTPUT_DIR"),
    ("VC_PSERVER_HOSTS", "VC_PSERVER_HOSTS"), ("CTR_PS_PORT", "CTR_PS_PORT"),
])
def test_half_configured_is_refused_naming_the_missing_variable(tmp_path, drop, needle):
    env = _pod_env("trainer", 0, tmp_path)
    env.pop(drop)
    env.pop("VK_TASK_INDEX", None)
    with pytest.raises(ContractError) as err:
        parse_role_env(env)
    assert needle in str(err.value) and "missing" in str(err.value)


def test_inconsistent_counts_and_index_are_refused(tmp_path):
    env = _pod_env("trainer", 1, tmp_path)
    env["CTR_TRAINERS"] = "3"
    with pytest.raises(ContractError, match="CTR_TRAINERS=3"):
        parse_role_env(env)
    env = _pod_env("trainer", 1, tmp_path)
    env["VC_PSERVER_NUM"] = "3"    # the svc plugin's count disagrees with its own host list
    with pytest.raises(ContractError, match="VC_PSERVER_NUM=3"):
        parse_role_env(env)
    env = _pod_env("trainer", 1, tmp_path)
    env["VC_TASK_INDEX"] = "5"
    with pytest.raises(ContractError, match="VC_TASK_INDEX=5"):
        parse_role_env(env)


def test_timeouts_come_from_the_contract_and_bad_ones_are_reported_with_the_rest(tmp_path):
    """CTR_DNS_WAIT_S, CTR_PUBLISH_TIMEOUT_S and CTR_PSERVER_WAIT_S are read when the pod's contract is, not at import
    time, and a bad one is listed with every other bad variable."""
    env = _pod_env("trainer", 0, tmp_path)
    spec = parse_role_env(env)
    assert (spec.dns_wait_s, spec.publish_timeout_s, spec.pserver_wait_s) == (120.0, 600.0, 600.0)
    env.update(CTR_DNS_WAIT_S="5", CTR_PUBLISH_TIMEOUT_S="30.5", CTR_PSERVER_WAIT_S="7")
    spec = parse_role_env(env)
    assert (spec.dns_wait_s, spec.publish_timeout_s, spec.pserver_wait_s) == (5.0, 30.5, 7.0)
    env.update(CTR_DNS_WAIT_S="soon", CTR_PUBLISH_TIMEOUT_S="-1", CTR_PSERVER_WAIT_S="0x", CTR_TRAINERS="3")
    with pytest.raises(ContractError) as err:
        parse_role_env(env)
    assert all(s in str(err.value) for s in ("CTR_DNS_WAIT_S='soon'", "CTR_PUBLISH_TIMEOUT_S='-1'",
                                              "CTR_PSERVER_WAIT_S='0x'", "CTR_TRAINERS=3"))

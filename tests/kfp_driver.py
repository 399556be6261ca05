"""What KFP's driver (backend 2.17.0) hands a task: its executor input, with the ``dsl.TaskConfig``.

A test double, restated in Python from ``backend/src/v2/driver/driver.go`` (``initPodSpecPatch``,
``getTaskConfigOptions``, the ``TaskConfig`` struct), ``k8s.go`` (``extendPodSpecPatch``,
``makeVolumeMountPatch``, ``GetWorkspacePVCName``), ``container.go`` (the TaskConfig replaces the
``TASK_CONFIG`` input in ``executorInput.inputs.parameterValues``) and ``resolve.go`` (``{{$.workspace_path}}``
-> ``/kfp-workspace``), for the settings a training task uses: resources, env, node selector,
tolerations, node affinity, PVC mounts, secrets as env and the run workspace. The JSON form is
Go's ``json.Marshal`` of the struct: all seven keys present, unset ones ``null``; ``resources`` is a
``ResourceRequirements`` whose empty maps are omitted; the accelerator goes to ``limits`` only.

It reads the compiled YAML (IR + kfp-kubernetes PlatformSpec), so a test can go from a pipeline
written with KFP's API to the executor input that KFP's backend would give the component.
"""
from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

__all__ = ["WORKSPACE_VOLUME", "task_config_for", "executor_input_for", "PASSTHROUGH_FIELDS"]

WORKSPACE_VOLUME = "kfp-workspace"
PASSTHROUGH_FIELDS = ("RESOURCES", "ENV", "KUBERNETES_AFFINITY", "KUBERNETES_TOLERATIONS",
                      "KUBERNETES_NODE_SELECTOR", "KUBERNETES_VOLUMES")
_PARAM = re.compile(r"\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}")


def _options(component: Mapping[str, Any]) -> Tuple[Dict[str, bool], Dict[str, bool]]:
    """``getTaskConfigOptions``: (fields passed through, fields also set on the task's own pod)."""
    passthroughs = component.get("taskConfigPassthroughs") or []
    on_config = {f: False for f in PASSTHROUGH_FIELDS}
    on_pod = {f: True for f in PASSTHROUGH_FIELDS}
    for pt in passthroughs:
        on_config[pt["field"]] = True
        on_pod[pt["field"]] = bool(pt.get("applyToTask", False))
    return on_config, on_pod


def _resolve(value: str, params: Mapping[str, Any]) -> str:
    return _PARAM.sub(lambda m: str(params[m.group(1)]), value)


def _protojson(value: Any) -> Any:
    """Numbers as protojson writes a ``structpb`` number: a double without a fraction prints as ``2``."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _protojson(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_protojson(v) for v in value]
    return value


def _task_params(task: Mapping[str, Any], pipeline_args: Mapping[str, Any], workspace_mount: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for name, spec in (task.get("inputs", {}).get("parameters") or {}).items():
        if "componentInputParameter" in spec:
            out[name] = pipeline_args[spec["componentInputParameter"]]
        elif "runtimeValue" in spec:
            value = spec["runtimeValue"]["constant"]
            if isinstance(value, str):
                value = value.replace("{{$.workspace_path}}", workspace_mount)
            out[name] = value
    return _protojson(out)


def task_config_for(pipeline_docs: List[Mapping[str, Any]], task_name: str, pipeline_args: Mapping[str, Any], *,
                    run_name: str = "ctr-run-abc12", workspace_mount: str = "/kfp-workspace"
                    ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The TaskConfig the driver builds for ``task_name``, and what it puts on the task's own pod.

    Args:
        pipeline_docs: the compiled pipeline YAML's documents (IR, then the PlatformSpec if any).
        task_name: the task in the root DAG.
        pipeline_args: the run's arguments (defaults filled in by the caller).
        run_name: the Argo workflow name (names the workspace PVC ``<run>-kfp-workspace``).
        workspace_mount: where the workspace is mounted (``/kfp-workspace`` on a cluster).

    Returns:
        ``(task_config_json, own_pod)``: the TaskConfig as the driver serializes it, and the step pod's
        settings under the same keys.
    """
    spec = pipeline_docs[0]
    platform = pipeline_docs[1] if len(pipeline_docs) > 1 else {}
    task = spec["root"]["dag"]["tasks"][task_name]
    component = spec["components"][task["componentRef"]["name"]]
    executor = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]
    kube = ((platform.get("platforms") or {}).get("kubernetes") or {})
    k8s = (kube.get("deploymentSpec") or {}).get("executors", {}).get(component["executorLabel"], {})
    on_config, on_pod = _options(component)
    params = {**{f"pipelinechannel--{k}": v for k, v in pipeline_args.items()},
              **_task_params(task, pipeline_args, workspace_mount)}

    config: Dict[str, Any] = {"affinity": None, "tolerations": None, "nodeSelector": None, "env": None,
                              "volumes": None, "volumeMounts": None, "resources": {}}
    pod: Dict[str, Any] = {"env": [], "resources": {}, "volumes": [], "volumeMounts": []}

    def put(field: str, key: str, value: Any, append: bool = False) -> None:
        for target, enabled in ((config, on_config[field]), (pod, on_pod[field])):
            if not enabled:
                continue
            if append:
                target[key] = (target.get(key) or []) + list(value)
            else:
                target[key] = value

    # initPodSpecPatch: env, resources, the workspace
    env = [{"name": e["name"], "value": e["value"]} for e in executor.get("env") or []]
    put("ENV", "env", env)
    res = executor.get("resources") or {}
    limits, requests = {}, {}
    for key, target, name in (("resourceMemoryLimit", limits, "memory"), ("resourceMemoryRequest", requests, "memory"),
                              ("resourceCpuLimit", limits, "cpu"), ("resourceCpuRequest", requests, "cpu")):
        if res.get(key):
            target[name] = _resolve(res[key], params)
    acc = res.get("accelerator") or {}
    if acc.get("resourceType") and acc.get("resourceCount"):
        limits[_resolve(acc["resourceType"], params)] = _resolve(acc["resourceCount"], params)
    resources = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
    put("RESOURCES", "resources", resources)
    if any(isinstance(v, str) and workspace_mount in v for v in params.values()):
        put("KUBERNETES_VOLUMES", "volumes",
            [{"name": WORKSPACE_VOLUME, "persistentVolumeClaim": {"claimName": f"{run_name}-{WORKSPACE_VOLUME}"}}],
            append=True)
        put("KUBERNETES_VOLUMES", "volumeMounts", [{"name": WORKSPACE_VOLUME, "mountPath": workspace_mount}],
            append=True)

    # extendPodSpecPatch
    for mount in k8s.get("pvcMount") or []:
        ref = mount.get("pvcNameParameter") or {}
        if "componentInputParameter" in ref:
            claim = pipeline_args[ref["componentInputParameter"]]
        else:
            claim = ref.get("runtimeValue", {}).get("constant") or mount.get("constant")
        m = {"name": claim, "mountPath": mount["mountPath"]}
        if mount.get("subPath"):
            m["subPath"] = mount["subPath"]
        put("KUBERNETES_VOLUMES", "volumes", [{"name": claim, "persistentVolumeClaim": {"claimName": claim}}],
            append=True)
        put("KUBERNETES_VOLUMES", "volumeMounts", [m], append=True)
    if k8s.get("nodeSelector"):
        put("KUBERNETES_NODE_SELECTOR", "nodeSelector", dict(k8s["nodeSelector"].get("labels") or {}))
    if k8s.get("tolerations"):
        tolerations = []
        for tol in k8s["tolerations"]:
            t = {k: tol[k] for k in ("key", "operator", "value", "effect") if tol.get(k)}
            if tol.get("tolerationSeconds") is not None:
                t["tolerationSeconds"] = int(tol["tolerationSeconds"])
            tolerations.append(t)
        put("KUBERNETES_TOLERATIONS", "tolerations", tolerations)
    for sec in k8s.get("secretAsEnv") or []:
        name = sec.get("secretName") or sec["secretNameParameter"]["runtimeValue"]["constant"]
        for kv in sec.get("keyToEnv") or []:
            ref: Dict[str, Any] = {"name": name, "key": kv["secretKey"]}
            if "optional" in sec:
                ref["optional"] = sec["optional"]
            put("ENV", "env", [{"name": kv["envVar"], "valueFrom": {"secretKeyRef": ref}}], append=True)
    terms = k8s.get("nodeAffinity") or []
    required, preferred = [], []
    for term in terms:
        sel = {}
        if term.get("matchExpressions"):
            sel["matchExpressions"] = [{"key": e["key"], "operator": e["operator"], **({"values": e["values"]} if e.get("values") else {})}
                                       for e in term["matchExpressions"]]
        if term.get("weight") is not None:
            preferred.append({"weight": term["weight"], "preference": sel})
        else:
            required.append(sel)
    if required or preferred:
        node_affinity: Dict[str, Any] = {}
        if required:
            node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": required}
        if preferred:
            node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
        put("KUBERNETES_AFFINITY", "affinity", {"nodeAffinity": node_affinity})
    return json.loads(json.dumps(config)), pod


def executor_input_for(pipeline_docs: List[Mapping[str, Any]], task_name: str, pipeline_args: Mapping[str, Any], *,
                       input_artifacts: Mapping[str, Tuple[str, str]], output_dir: str,
                       run_name: str = "ctr-run-abc12", workspace_mount: str = "/kfp-workspace",
                       task_config: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The ``executorInput`` of ``task_name`` (``--executor_input`` of the launcher's command).

    Args:
        input_artifacts: ``{name: (schemaTitle, local path)}``; the launcher already downloaded them.
        output_dir: where output artifacts and ``executor_output.json`` go.
        task_config: override the TaskConfig (default: :func:`task_config_for`).
    """
    spec = pipeline_docs[0]
    task = spec["root"]["dag"]["tasks"][task_name]
    component = spec["components"][task["componentRef"]["name"]]
    params = _task_params(task, pipeline_args, workspace_mount)
    for name, inp in (component.get("inputDefinitions", {}).get("parameters") or {}).items():
        if inp.get("parameterType") == "TASK_CONFIG":
            params[name] = task_config if task_config is not None else task_config_for(
                pipeline_docs, task_name, pipeline_args, run_name=run_name, workspace_mount=workspace_mount)[0]
    artifacts = {name: {"artifacts": [{"name": name, "type": {"schemaTitle": title}, "uri": path, "metadata": {}}]}
                 for name, (title, path) in input_artifacts.items()}
    outputs = {}
    for name, out in (component.get("outputDefinitions", {}).get("artifacts") or {}).items():
        outputs[name] = {"artifacts": [{"name": name, "type": out["artifactType"], "uri": f"{output_dir}/{name}",
                                        "metadata": {}}]}
    return {"inputs": {"parameterValues": params, "artifacts": artifacts},
            "outputs": {"artifacts": outputs, "outputFile": f"{output_dir}/executor_output.json"}}

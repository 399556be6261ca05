"""Components for KFP backends older than 2.15: the same code without the ``TaskConfig`` interface.

Why: a KFP 2.14 API server rejects a pipeline whose component has a ``TASK_CONFIG`` parameter at
upload (``invalid value for enum field parameterType: "TASK_CONFIG"``). The legacy YAML
(``ctr-volcano compile --legacy-kfp``) therefore uses a copy of the component whose interface lacks
the ``task_config`` input and the passthroughs; its code is unchanged. KFP's executor hands a
``dsl.TaskConfig`` parameter that is absent from the executor input an empty ``TaskConfig``, so the
step then runs on its explicit parameters alone (``cpu``, ``memory``, ``gpus``, ``pvc_name``...).
"""
from __future__ import annotations

import copy
from typing import Any

__all__ = ["without_task_config", "drop_fields_old_backends_refuse"]


def without_task_config(component: Any) -> Any:
    """A copy of the Python component ``component`` with no ``TaskConfig`` input and no passthroughs.

    Args:
        component: a ``@dsl.component`` (a ``kfp.dsl.python_component.PythonComponent``).

    Returns:
        A ``PythonComponent`` with the same name, image, command and function.
    """
    from kfp.dsl import python_component
    from kfp.dsl.types import type_utils

    spec = copy.deepcopy(component.component_spec)
    spec.inputs = {name: inp for name, inp in (spec.inputs or {}).items()
                   if not type_utils.is_task_config_type(inp.type)}
    spec.task_config_passthroughs = None
    return python_component.PythonComponent(component_spec=spec, python_func=component.python_func)


def drop_fields_old_backends_refuse(package: str) -> None:
    """Rewrite the compiled package at ``package`` without the platform-spec fields a 2.14 API
    server does not know.

    Why: kfp-kubernetes 2.17.3 writes ``optional: false`` into every ``secretAsEnv`` entry, and a
    2.14.3 API server refuses the whole run at creation ("failed to unmarshal kubernetes config:
    unknown field \"optional\""). ``false`` is the field's default, so dropping it changes nothing.
    """
    import yaml

    with open(package, encoding="utf-8") as fh:
        docs = list(yaml.safe_load_all(fh))
    for doc in docs[1:]:
        executors = doc.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {}).get("executors", {})
        for config in executors.values():
            for secret in config.get("secretAsEnv", []):
                if secret.get("optional") is False:
                    del secret["optional"]
    with open(package, "w", encoding="utf-8") as fh:
        yaml.safe_dump_all(docs, fh, sort_keys=True)

"""The training step's flags, derived from its one declaration: ``ctr-volcano train`` and ``render-job``.

Why derived: every flag, its type, default and help text comes from the
:class:`~ctr_volcano.training.params.StepParams` field it sets (``metadata``), so the two verbs, the
``train_ctr`` component and the pipelines cannot drift apart; :func:`params_from_args` turns a
command line back into the one ``StepParams``. ``render-job`` gets the flags of every field that
reaches the Volcano Job (``metadata["job"]`` is not ``False``, the scope is not ``local``).

The trainer's own settings (``--epochs``, ``--batch-size``, ``--lr``, ``--model``,
``--model-config``) default to unset: a ``--config`` file's value wins over the step's default, a
flag over both.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import Field
from typing import Any, Dict, Iterator, Optional

from ctr_model.models import FAMILIES
from ctr_volcano.training.params import step_fields, value_type

__all__ = ["add_step_arguments", "params_from_args", "flag_of", "dest_of", "VERBS"]

VERBS = ("train", "render-job")
#: Choices the light step declaration cannot import (the families live with the models).
_CHOICES = {"model_family": FAMILIES}
_GROUPS = {
    "store": ("object store (s3:// data, output and hand-off)",
              "The gang reads s3:// data and writes checkpoints, model and metrics to an s3:// prefix over "
              "the S3 API, with no shared volume. Credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
              "here; on Volcano the pods read them from --s3-secret."),
    "volcano": ("volcano backend (--backend volcano)", None),
}


def _field_named(name: str) -> Optional[Field]:
    """The step field ``name``, or the one that sets TrainConfig key ``name`` (``model``)."""
    return next((f for f in step_fields() if name in (f.name, f.metadata.get("trainer"))), None)


def flag_of(name: str) -> Optional[str]:
    """The command-line flag of ``StepParams`` field ``name``, or of the field that sets TrainConfig
    key ``name``; ``None`` when it has none."""
    field = _field_named(name)
    if field is None:
        return None
    return field.metadata.get("flag", "--" + field.name.replace("_", "-"))


def dest_of(name: str) -> Optional[str]:
    """The ``argparse`` destination of :func:`flag_of` (the field's name)."""
    field = _field_named(name)
    return None if field is None else field.name


def _fields(verb: str) -> Iterator[Field]:
    for f in step_fields():
        meta = f.metadata
        if flag_of(f.name) is None:
            continue
        if verb == "render-job" and (meta.get("job") is False or meta.get("scope") == "local"):
            continue
        yield f


def _help(f: Field) -> str:
    meta = f.metadata
    text = meta["doc"]
    if "trainer" in meta:
        shown = "unset" if f.default is None else f.default
        return f"{text} (default: {meta.get('unset', shown)}, or the --config file's)".replace("%", "%%")
    if meta.get("unset"):
        return f"{text} (default: {meta['unset']})".replace("%", "%%")
    return text.replace("%", "%%") + ("" if f.default is None else " (default: %(default)s)")


def add_step_arguments(parser: argparse.ArgumentParser, verb: str = "train") -> None:
    """Add the step's flags of ``verb`` (``train`` or ``render-job``) to ``parser``, in groups."""
    groups: Dict[str, Any] = {}
    for f in _fields(verb):
        meta = f.metadata
        key = meta.get("group") or ("volcano" if meta.get("scope") == "volcano" and verb == "train" else "")
        if key and key not in groups:
            groups[key] = parser.add_argument_group(*_GROUPS[key])
        target = groups.get(key, parser)
        names = [flag_of(f.name)] + (["--name"] if f.name == "job_name" and verb == "render-job" else [])
        target.add_argument(*names, dest=f.name, type=value_type(f.name), choices=meta.get("choices") or _CHOICES.get(f.name),
                            metavar=meta.get("metavar"), help=_help(f),
                            default=None if "trainer" in meta else f.default)
    parser.add_argument("--config", default=None, metavar="FILE",
                        help="a TrainConfig JSON file (docs/training.md); its fields are the trainer's "
                             "own, and the flags above win over it")


def _trainer_config(args: argparse.Namespace) -> Dict[str, Any]:
    """The TrainConfig of ``--config`` with the trainer flags applied, validated."""
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.params import checked_train_config

    data: Dict[str, Any] = {}
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise BadInput("--config", args.config, f"cannot read a JSON object ({exc})") from None
        if not isinstance(data, dict):
            raise BadInput("--config", args.config, "the file must hold one JSON object of TrainConfig fields")
    for f in step_fields():
        value = getattr(args, f.name, None)
        if "trainer" in f.metadata and value is not None:
            data[f.metadata["trainer"]] = value
    if isinstance(data.get("model_config"), str):
        try:
            data["model_config"] = json.loads(data["model_config"])
        except ValueError as exc:
            raise BadInput("--model-config", data["model_config"], f"not valid JSON ({exc}); pass a JSON "
                                                                   'object such as \'{"cross_layers": 2}\'') from None
    return checked_train_config(data)   # main() names the flag for a config.<key> error


def params_from_args(args: argparse.Namespace, config: Optional[Dict[str, Any]] = None, **fixed: Any) -> Any:
    """The :class:`~ctr_volcano.training.params.StepParams` of a ``train`` or ``render-job`` command line.

    Args:
        args: the parsed flags.
        config: the TrainConfig (default: ``--config`` with the trainer flags applied, read now);
            its values fill the trainer's settings the flags leave unset, TrainConfig's defaults the rest.
        fixed: fields the verb sets itself (``render-job``: ``backend="volcano"``).
    """
    from ctr_model.config import TrainConfig
    from ctr_volcano.training.params import StepParams

    config = _trainer_config(args) if config is None else dict(config)
    base = TrainConfig.from_dict(config)
    values: Dict[str, Any] = {"config": config}
    for f in step_fields():
        if "trainer" in f.metadata:
            key = f.metadata["trainer"]
            values[f.name] = config.get(key) if key == "model_config" else getattr(base, key)
        elif hasattr(args, f.name) and flag_of(f.name):
            values[f.name] = getattr(args, f.name)
    if values.get("ttl_seconds_after_finished") == -1:
        values["ttl_seconds_after_finished"] = None   # -1 keeps the finished Job
    values.update(fixed)
    return StepParams(**values)

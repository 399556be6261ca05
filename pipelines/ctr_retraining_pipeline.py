"""The recurring retraining pipeline: window -> prep -> champion -> warm-started train -> gate -> registry.

What a scheduled run does (``ctr-volcano submit --cron ...`` creates the schedule):

1. ``resolve_data_window`` turns the templated ``data_uri`` into the days this run reads, from the
   run's scheduled time (``run_date`` overrides it for back-fills) and copies them into one Dataset.
2. ``prepare_ctr_data`` preps them (its stats record the window, its profile the data).
3. ``find_champion`` fetches the registry's champion (or says there is none yet).
4. ``validate_ctr_data`` compares the day's profile with the champion's training profile (or a pinned
   baseline): ``fail`` stops the run here, before training, with the findings in its error.
5. ``train_ctr`` continues the champion on the new days (warm start: its pservers load the champion's
   checkpoint), or trains from scratch on the first run.
6. ``champion_challenger_gate`` scores champion and challenger on the same fresh test split; a day whose
   validation warned is not promoted unless ``allow_warnings``.
7. ``register_model`` stores the challenger as a new version (parent: the champion, with the gate's
   decision and the validation's verdict) and, only if the gate passed it, moves the champion pointer.
8. Optionally (``score_data_uri`` set) and only if the new version became the champion,
   ``resolve_data_window`` copies the run day's candidates and ``score_ctr`` scores them with it.

The gate's verdict is an argument of the registration step, not a ``dsl.If`` (see
components/retrain.py); the only conditions are the scoring step's, on the pipeline parameter and on
``register_model``'s single output (``kfp.local`` evaluates both; it does not evaluate a condition on a
named output of a multi-output task such as the gate).
On a cluster the data, the registry and the training handoff live on one ReadWriteMany PVC mounted by
every step that touches them; under ``kfp.local`` the mounts are ignored and paths are local.

The default YAML needs a KFP backend >= 2.15: ``train_ctr`` takes a ``dsl.TaskConfig``, which 2.14
refuses at upload. :data:`ctr_retraining_pipeline_legacy` is the same pipeline with ``train_ctr``
stripped of that interface (:func:`pipelines.legacy_kfp.without_task_config`); nothing else
differs, since this pipeline hands data over through the named claim either way.
``ctr-volcano compile --legacy-kfp`` writes its YAML and ``ctr-volcano submit --legacy-kfp`` uploads it.

Compiled to ``ctr_retraining_pipeline.yaml`` next to this file by ``ctr-volcano compile``.
"""

from typing import Any, Mapping, NamedTuple

from kfp import dsl, kubernetes
from kfp.dsl import Markdown, Metrics, Model

from components.data_prep import prepare_ctr_data
from components.retrain import champion_challenger_gate, find_champion, register_model, resolve_data_window
from components.score import score_ctr
from components.signature import pipeline_with_parameters
from components.train import train_ctr
from components.validate import validate_ctr_data
from ctr_model.defaults import DEFAULT_HASH_BUCKETS
from ctr_volcano.training.params import PVC_MOUNT_PATH, kfp_parameters
from pipelines.legacy_kfp import without_task_config

__all__ = ["ctr_retraining_pipeline", "ctr_retraining_pipeline_legacy", "ctr_retraining_pipeline_local",
           "build_retraining_pipeline",
           "RETRAINING_PIPELINE_NAME", "DEFAULT_DAILY_DATA_URI", "DEFAULT_REGISTRY"]

RETRAINING_PIPELINE_NAME = "ctr-retraining-pipeline"
#: The claim shared by the steps and the training gang (deploy/pvc-example.yaml).
#: Daily partitions on the claim, one directory per day.
DEFAULT_DAILY_DATA_URI = PVC_MOUNT_PATH + "/clicks/day={date}"
#: The model registry on the claim.
DEFAULT_REGISTRY = PVC_MOUNT_PATH + "/registry"
#: What this pipeline adds to the training step's own parameter texts. No ``artifact_store``: warm
#: start reads the champion from a volume every pserver mounts, so the hand-off is the claim.
_NOTES = {"pservers": "must equal the champion's to warm-start from it",
          "pvc_name": f"it also holds the data and the registry, mounted at {PVC_MOUNT_PATH}"}


def build_retraining_pipeline(run_time_placeholders: bool = True, legacy: bool = False):
    """The pipeline; ``run_time_placeholders=False`` is the variant ``kfp.local`` can run, ``legacy=True``
    the one for KFP backends older than 2.15 (``train_ctr`` without its ``TaskConfig`` interface).

    kfp 2.17.3's local runner cannot resolve ``PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER`` or
    ``PIPELINE_JOB_CREATE_TIME_UTC_PLACEHOLDER`` (``IndexError`` in
    ``kfp/local/placeholder_utils.py``), so the local variant passes ``""`` for both and the window
    falls back to ``run_date`` (back-fills always set it) or today. Nothing else differs.
    """
    schedule_time = dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER if run_time_placeholders else ""
    create_time = dsl.PIPELINE_JOB_CREATE_TIME_UTC_PLACEHOLDER if run_time_placeholders else ""
    train_component = without_task_config(train_ctr) if legacy else train_ctr

    @pipeline_with_parameters(kfp_parameters("pipeline", exclude=("artifact_store",), notes=_NOTES),
                              after="prep_fanout", name=RETRAINING_PIPELINE_NAME,
                              display_name="CTR recurring retraining: warm start from the champion, "
                                           "champion/challenger gate")
    def ctr_retraining_pipeline(
        data_uri: str = DEFAULT_DAILY_DATA_URI,
        run_date: str = "",
        window_days: int = 1,
        lag_days: int = 0,
        registry: str = DEFAULT_REGISTRY,
        model_name: str = "ctr-dnn",
        hash_buckets: int = DEFAULT_HASH_BUCKETS,
        test_fraction: float = 0.1,
        shards: int = 8,
        max_bad_fraction: float = 0.001,
        seed: int = 42,
        feature_spec: str = "",
        prep_fanout: int = 0,
        min_auc: float = 0.7,
        tolerance: float = 0.002,
        gate_task: str = "",
        warm_start: bool = True,
        validation_thresholds: str = "",
        validation_baseline: str = "",
        allow_warnings: bool = False,
        score_data_uri: str = "",
        score_keep_columns: str = "",
        score_fanout: int = 0,
        **step,
    ) -> NamedTuple("Outputs", [("published", bool), ("gate_metrics", Metrics), ("gate_report", Markdown),
                                ("model", Model)]):
        """Retrain the CTR model on the run's days, continuing the champion, and promote it only if it is not worse.

        Args:
            data_uri: raw click logs (Criteo TSV or the layout feature_spec declares) with a {date} template (or {date:%Y/%m/%d}), e.g. /mnt/ctr/clicks/day={date}; a path on the PVC or an s3:// URI.
            run_date: YYYY-MM-DD for back-fills; empty uses the run's scheduled time (recurring runs), then its create time.
            window_days: consecutive days of data each run reads, ending at the run date minus lag_days.
            lag_days: days between the run date and the newest day read (1 for a nightly run on yesterday's data).
            registry: model registry directory on the PVC (or an s3:// prefix): versions/<run id>/ and the champion pointer.
            model_name: the model's name in the registry.
            hash_buckets: size of the categorical feature hash space; must stay the same across runs to warm-start.
            test_fraction: share of each run's rows held out to compare champion and challenger.
            shards: number of training-data shards; a multiple of trainers.
            max_bad_fraction: the prep step fails if more than this share of raw lines is malformed.
            seed: seed of the train/test split.
            feature_spec: the raw data's layout as a JSON feature spec (docs/features.md); empty means Criteo TSV; keep it the same across runs to warm-start.
            prep_fanout: 0 preps in one step; N > 0 fans prep out to a Volcano Job of N prep pods on pvc_name (Criteo TSV). The output is the same for every value.
            min_auc: the challenger is never published below this test AUC (it decides the first run).
            tolerance: the challenger is published if its AUC >= the champion's - tolerance on the same split.
            gate_task: for a multi-task model (esmm, mmoe), the label whose AUC over impressions the gate compares, e.g. purchase; empty: the first label.
            warm_start: continue the champion; False trains from scratch (needed once after changing the network shape or hash_buckets), still gated against the champion.
            validation_thresholds: data validation thresholds for this run as JSON, over the feature spec's validation: section (docs/validation.md), e.g. {"js_divergence": 0.5}.
            validation_baseline: validate the day against this profile (a profile.json, prep output or model on the PVC) instead of the champion's training data.
            allow_warnings: promote a challenger even if the day's data validation warned (a failed validation always stops the run before training).
            score_data_uri: the day's candidate rows to score with the new champion, in the feature spec's layout (label optional), with a {date} template like data_uri (the run date, no lag), e.g. /mnt/ctr/candidates/day={date}; empty scores nothing. Scored only when this run promotes its model.
            score_keep_columns: comma-separated candidate columns copied into the scores beside probability, e.g. id.
            score_fanout: 0 scores in one step; N > 0 fans scoring out to a Volcano Job of N pods on pvc_name. The scores are the same for every value.

        Returns:
            published: whether the challenger became the champion; gate_metrics and gate_report: both
            AUCs and the reason; model: the challenger.
        """
        window = resolve_data_window(
            data_uri=data_uri, run_date=run_date, schedule_time=schedule_time,
            create_time=create_time, window_days=window_days,
            lag_days=lag_days)
        window.set_display_name("data window")
        prep = prepare_ctr_data(
            raw_data=window.outputs["raw_data"], hash_buckets=hash_buckets, test_fraction=test_fraction,
            shards=shards, max_bad_fraction=max_bad_fraction, seed=seed, feature_spec=feature_spec,
            fanout=prep_fanout, pvc_name=step["pvc_name"], pvc_mount_path=PVC_MOUNT_PATH,
            namespace=step["namespace"], queue=step["queue"])
        prep.set_display_name("prepare data")
        champion = find_champion(registry=registry, model_name=model_name)
        champion.set_display_name("find champion")
        validate = validate_ctr_data(
            data=prep.outputs["train_data"], champion=champion.outputs["champion"], window=window.outputs["raw_data"],
            feature_spec=feature_spec, validation_thresholds=validation_thresholds,
            validation_baseline=validation_baseline)
        validate.set_display_name("validate data")
        train = train_component(
            train_data=prep.outputs["train_data"], init_model=champion.outputs["champion"],
            pvc_mount_path=PVC_MOUNT_PATH, run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER, warm_start=warm_start, **step)
        train.set_display_name("train (warm start from the champion)")
        train.after(validate)      # a failed validation stops the run before training
        gate = champion_challenger_gate(challenger=train.outputs["model"], champion=champion.outputs["champion"],
                                        test_data=prep.outputs["test_data"], validation=validate.outputs["metrics"],
                                        min_auc=min_auc, tolerance=tolerance, allow_warnings=allow_warnings,
                                        gate_task=gate_task)
        gate.set_display_name("champion/challenger gate")
        register = register_model(
            model=train.outputs["model"], champion=champion.outputs["champion"],
            gate_metrics=gate.outputs["metrics"], raw_data=window.outputs["raw_data"], registry=registry,
            model_name=model_name, version=dsl.PIPELINE_JOB_ID_PLACEHOLDER, promote=gate.outputs["Output"])
        register.set_display_name("register / promote")
        for task in (window, prep, champion, validate, train, register):   # ignored by kfp.local
            kubernetes.mount_pvc(task, pvc_name=step["pvc_name"], mount_path=PVC_MOUNT_PATH)
        with dsl.If(score_data_uri != "", name="score-candidates"):
            with dsl.If(register.output == True, name="promoted"):  # noqa: E712 (a KFP condition)
                _score_candidates(score_data_uri, run_date, schedule_time, create_time, train.outputs["model"],
                                  score_keep_columns, score_fanout, step)
        outputs = NamedTuple("Outputs", [("published", bool), ("gate_metrics", Metrics),
                                         ("gate_report", Markdown), ("model", Model)])
        return outputs(published=gate.outputs["Output"], gate_metrics=gate.outputs["metrics"],
                       gate_report=gate.outputs["report"], model=train.outputs["model"])

    return ctr_retraining_pipeline


def _score_candidates(score_data_uri: Any, run_date: Any, schedule_time: Any, create_time: Any, model: Any,
                      keep_columns: Any, fanout: Any, step: Mapping[str, Any]) -> None:
    """The run day's candidates, scored with the model the run has just promoted (inside the pipeline's
    conditions): a one-day window over ``score_data_uri``, then ``score_ctr`` on the claim. The arguments
    are the pipeline's channels (its parameters, the times it passes the data window, the trained model)."""
    candidates = resolve_data_window(data_uri=score_data_uri, run_date=run_date, schedule_time=schedule_time,
                                     create_time=create_time, window_days=1, lag_days=0)
    candidates.set_display_name("candidates window")
    scoring = score_ctr(model=model, candidates=candidates.outputs["raw_data"], keep_columns=keep_columns,
                        fanout=fanout, pvc_name=step["pvc_name"], pvc_mount_path=PVC_MOUNT_PATH,
                        namespace=step["namespace"], queue=step["queue"])
    scoring.set_display_name("score candidates with the new champion")
    for task in (candidates, scoring):   # ignored by kfp.local
        kubernetes.mount_pvc(task, pvc_name=step["pvc_name"], mount_path=PVC_MOUNT_PATH)


ctr_retraining_pipeline = build_retraining_pipeline()
#: For KFP backends older than 2.15 (``compile --legacy-kfp``, ``submit --legacy-kfp``).
ctr_retraining_pipeline_legacy = build_retraining_pipeline(legacy=True)
#: What ``ctr-volcano run --days`` runs through kfp.local (see :func:`build_retraining_pipeline`).
ctr_retraining_pipeline_local = build_retraining_pipeline(run_time_placeholders=False)

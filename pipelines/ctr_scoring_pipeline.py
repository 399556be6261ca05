"""The CTR batch-scoring pipeline: a day of raw candidates to Parquet shards of probabilities, ids kept.

Why it looks like this:

* The candidates enter through ``dsl.importer`` on ``data_uri``, as the training pipeline's raw data
  does (any URI the launcher downloads on a cluster, a local path under ``kfp.local``).
* The model is either an artifact (``model_uri``: a model directory a training run published, or any
  exported model) or the registry's champion (``registry`` + ``model_name``). Each source has its own
  branch with its own scoring task, so no branch output has to be merged (``dsl.OneOf``): the run
  shows the one that ran.
* No run workspace and no claim: the scoring step reads its inputs and writes its output as
  artifacts, and ``fanout`` runs that many worker processes inside the step.

Compiled to ``ctr_scoring_pipeline.yaml`` next to this file by ``ctr-volcano compile``; a test fails
when the two drift apart. The same pipeline serves KFP backends older than 2.15 (it uses neither
TaskConfig nor a workspace), so ``ctr_scoring_pipeline_legacy`` is the same object.
"""

from kfp import dsl
from kfp.dsl import Dataset, Model

from components.retrain import find_champion
from components.score import score_ctr

__all__ = ["ctr_scoring_pipeline", "ctr_scoring_pipeline_legacy", "SCORING_PIPELINE_NAME",
           "DEFAULT_CANDIDATES_URI"]

SCORING_PIPELINE_NAME = "ctr-scoring-pipeline"
#: Where the UI's one-click run reads candidates (upload a day of raw rows there).
DEFAULT_CANDIDATES_URI = "minio://mlpipeline/ctr-volcano/candidates"


@dsl.pipeline(name=SCORING_PIPELINE_NAME, display_name="CTR batch scoring: candidates to probabilities, ids kept")
def ctr_scoring_pipeline(
    data_uri: str = DEFAULT_CANDIDATES_URI,
    model_uri: str = "",
    registry: str = "",
    model_name: str = "ctr-dnn",
    keep_columns: str = "id",
    fanout: int = 1,
):
    """Score a day of raw candidate rows with a trained CTR model; the output keeps the rows' ids.

    Args:
        data_uri: raw candidate rows (a file or a directory) in the model's feature-spec layout, label optional: minio://, s3:// or gs:// on a cluster, a local path under kfp.local.
        model_uri: the model directory to score with (e.g. a training run's published model); empty uses the registry's champion.
        registry: the model registry (a directory or an s3:// prefix) whose champion scores when model_uri is empty.
        model_name: the model's name in the registry.
        keep_columns: comma-separated input columns copied into the output beside probability (e.g. id).
        fanout: worker processes in the scoring step; the shards are the same for every value.
    """
    candidates = dsl.importer(artifact_uri=data_uri, artifact_class=Dataset, reimport=False)
    candidates.set_display_name("candidates")
    with dsl.If(model_uri != "", name="model-artifact"):
        model = dsl.importer(artifact_uri=model_uri, artifact_class=Model, reimport=False)
        model.set_display_name("model")
        score_ctr(model=model.output, candidates=candidates.output, keep_columns=keep_columns,
                  fanout=fanout).set_display_name("score")
    with dsl.Else(name="registry-champion"):
        champion = find_champion(registry=registry, model_name=model_name)
        champion.set_display_name("find champion")
        score_ctr(model=champion.outputs["champion"], candidates=candidates.output, keep_columns=keep_columns,
                  fanout=fanout).set_display_name("score the champion")


#: The variant for KFP backends older than 2.15: the same pipeline (no TaskConfig, no workspace).
ctr_scoring_pipeline_legacy = ctr_scoring_pipeline

"""Batch scoring: a file (or a day) of raw candidates to Parquet shards of probabilities, the chosen
columns kept, with the same transforms and ONNX graph as the model server, fanned out over prep's
units (:mod:`.reading` the input, :mod:`.unit` one unit scored, :mod:`.run` the command's plan and
merge). docs/scoring.md has the output contract."""
from ctr_volcano.scoring.run import REJECTS_FILE, SCORES_FILE, ScoreArgs, score

__all__ = ["ScoreArgs", "score", "SCORES_FILE", "REJECTS_FILE"]

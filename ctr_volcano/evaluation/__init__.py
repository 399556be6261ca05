"""Evaluation: score a test split with an exported model, exact metrics and the HTML report."""

__all__: list[str] = []

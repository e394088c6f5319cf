"""Evaluation of P-SP models (STS correlations; more suites build on this)."""

from psp_core.evaluation.sts import StsEvaluator, pearson, read_sts_file, spearman

__all__ = ["StsEvaluator", "pearson", "read_sts_file", "spearman"]

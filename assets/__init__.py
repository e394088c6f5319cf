"""Dagster assets, one module per pipeline stage, partitioned by language."""

"""Corpus operations as plain streaming functions over files (no Dagster here)."""

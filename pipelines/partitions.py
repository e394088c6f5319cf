"""One partition per language in the registry (the paper's eight by default)."""

from __future__ import annotations

from dagster import StaticPartitionsDefinition

from pipelines.languages import load_registry

language_partitions = StaticPartitionsDefinition(load_registry().codes)

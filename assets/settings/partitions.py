"""One partition per language in the registry (the paper's eight by default), a language whose
table is broken included: its runs fail at once with the table's error."""

from __future__ import annotations

from dagster import StaticPartitionsDefinition

from assets.settings.languages import load_registry

language_partitions = StaticPartitionsDefinition(load_registry().codes)

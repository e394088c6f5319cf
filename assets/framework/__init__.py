"""The stage framework every asset is built with: a stage's folder, files and manifest, the factory
that makes a Dagster asset of a plan and a report (``stage_asset``), typed records, metadata,
the asset catalog, the log bridge into the run's event log, and the guards of a training slot."""

"""The Dagster code location: resources, jobs, schedules, sensors and the one Definitions."""

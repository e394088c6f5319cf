"""Fixtures for the asset tests (the loopback OPUS server of tests/ops, reused)."""

from tests.ops.conftest import opus_server  # noqa: F401

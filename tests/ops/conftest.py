"""Fixtures for the corpus-source tests: a loopback OPUS server per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ops.opus_server import OpusServer


@pytest.fixture()
def opus_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpusServer]:
    """A started :class:`OpusServer` on 127.0.0.1, bypassing any configured HTTP proxy."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    server = OpusServer().start()
    yield server
    server.stop()

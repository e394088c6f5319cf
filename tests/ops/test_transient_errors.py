"""is_transient(): real errors from a loopback server, a refused port and a silent socket, each
classified as worth retrying later (the network's failures) or not (everything else)."""

from __future__ import annotations

import socket
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ops.sources.opus import OpusCorpus, fetch_opus_zip
from ops.sources.transient_errors import is_transient
from psp_core.files.download import download, retrying_session
from tests.ops.opus_server import Fault, OpusServer, build_moses_zip

FAST = {"retries": 1, "backoff": 0.001, "timeout": 10}
REFUSED = "http://127.0.0.1:9"  # the discard port: nothing listens on loopback


@pytest.fixture()
def silent_url() -> Iterator[str]:
    """A URL whose server accepts the connection and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/file.zip"
    listener.close()


def download_with(fault: Fault | None, server: OpusServer, tmp_path: Path) -> None:
    zip_bytes = build_moses_zip("Demo", "en", "de", ["one", "two"], ["eins", "zwei"])
    url = server.add_file("/files/corpus.zip", zip_bytes)
    if fault is not None:
        server.fail("/files/corpus.zip", fault)
    download(url, tmp_path / "corpus.zip", **FAST)


def fetch_zip(
    server: OpusServer,
    tmp_path: Path,
    *,
    api_base: str,
    version: str = "v1",
    zip_fault: Fault | None = None,
) -> None:
    zip_bytes = build_moses_zip("Tanzil", "en", "de", ["one"], ["eins"])
    path = server.add_corpus("Tanzil", "v1", "en", "de", zip_bytes)
    if zip_fault is not None:
        server.fail(path, zip_fault)
    fetch_opus_zip(
        OpusCorpus("Tanzil", version), "de", tmp_path / "cache", api_base=api_base, **FAST
    )


def api_answering(server: OpusServer, status: int) -> str:
    """An API base URL whose every answer is ``status``."""
    server.fail("/down/", Fault(status=status, times=99))
    return f"{server.base_url}/down/"


CASES: list[tuple[str, Callable[[OpusServer, Path, str], None], bool]] = [
    ("download-404", lambda s, t, u: download_with(Fault(status=404, times=9), s, t), False),
    ("download-403", lambda s, t, u: download_with(Fault(status=403, times=9), s, t), False),
    ("download-408", lambda s, t, u: download_with(Fault(status=408, times=9), s, t), True),
    ("download-429", lambda s, t, u: download_with(Fault(status=429, times=9), s, t), True),
    ("download-503", lambda s, t, u: download_with(Fault(status=503, times=9), s, t), True),
    ("download-drops", lambda s, t, u: download_with(Fault(drop_after=0, times=9), s, t), True),
    (
        "download-truncated-zip",
        lambda s, t, u: download_with(Fault(truncate_to=100, times=9), s, t),
        False,
    ),
    ("download-refused", lambda s, t, u: download(f"{REFUSED}/x.zip", t / "x.zip", **FAST), True),
    (
        "download-timeout",
        lambda s, t, u: download(u, t / "x.zip", retries=0, backoff=0.001, timeout=0.2),
        True,
    ),
    (
        "download-no-scheme",
        lambda s, t, u: download("127.0.0.1/x.zip", t / "x.zip", **FAST),
        False,
    ),
    (
        "opus-zip-404",
        lambda s, t, u: fetch_zip(s, t, api_base=s.api_url, zip_fault=Fault(status=404, times=9)),
        False,
    ),
    (
        "opus-zip-502",
        lambda s, t, u: fetch_zip(s, t, api_base=s.api_url, zip_fault=Fault(status=502, times=9)),
        True,
    ),
    ("opus-api-500", lambda s, t, u: fetch_zip(s, t, api_base=api_answering(s, 500)), True),
    ("opus-api-404", lambda s, t, u: fetch_zip(s, t, api_base=api_answering(s, 404)), False),
    ("opus-api-refused", lambda s, t, u: fetch_zip(s, t, api_base=f"{REFUSED}/"), True),
    (
        "opus-version-not-listed",
        lambda s, t, u: fetch_zip(s, t, api_base=s.api_url, version="v9"),
        False,
    ),
    (
        "api-timeout",
        lambda s, t, u: retrying_session(0).get(u, timeout=0.2),
        True,
    ),
    ("bad-zip", lambda s, t, u: zipfile.ZipFile(__file__), False),
    ("missing-file", lambda s, t, u: open(t / "absent", "rb"), False),
    ("unknown-key", lambda s, t, u: {}["fr"], False),
]


@pytest.mark.parametrize(("name", "make_error", "transient"), CASES, ids=[c[0] for c in CASES])
def test_only_network_failures_are_transient(
    opus_server: OpusServer, tmp_path: Path, silent_url: str, name: str, make_error, transient
) -> None:
    with pytest.raises(Exception) as caught:
        make_error(opus_server, tmp_path, silent_url)
    assert is_transient(caught.value) is transient, repr(caught.value)

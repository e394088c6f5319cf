"""A loopback HTTP server that speaks the OPUS API and serves files, with injectable faults.

Start one per test (``OpusServer().start()``, or the ``opus_server`` fixture in conftest.py),
register zips built from generated text with :meth:`OpusServer.add_corpus` (or any bytes with
:meth:`OpusServer.add_file`), queue faults per path with :meth:`OpusServer.fail`, and count the
requests it saw with :meth:`OpusServer.count`. The real ``requests`` code talks to it over TCP.

Served paths mirror OPUS: ``/opusapi/?source=..&target=..&corpus=..&version=..`` answers JSON
``{"corpora": [...]}`` with source/target sorted alphabetically, and zips live at
``/OPUS-{corpus}/{version}/moses/{l1}-{l2}.txt.zip``. File answers support ``Range`` (206),
``If-Range`` (a stale validator gets the whole file), ``416`` past the end, and an ETag.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import threading
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

_RANGE = re.compile(r"bytes=(\d+)-$")


@dataclass
class Fault:
    """What the server does wrong on the next ``times`` requests for a path.

    Attributes:
        status: answer this HTTP status (e.g. 500, 404) instead of the file.
        drop_after: announce the full length, send this many bytes, then close the connection.
        truncate_to: serve only the first bytes, with a Content-Length that matches them.
        ignore_range: answer ``200`` with the whole file even when a Range was asked for.
        pause: send half the body, wait this many seconds, then send the rest (a slow transfer).
        times: how many requests the fault applies to.
    """

    status: int | None = None
    drop_after: int | None = None
    truncate_to: int | None = None
    ignore_range: bool = False
    pause: float = 0.0
    times: int = 1


def build_moses_zip(
    corpus: str,
    lang_a: str,
    lang_b: str,
    lines_a: Sequence[str | bytes],
    lines_b: Sequence[str | bytes],
    *,
    extra_members: dict[str, bytes] | None = None,
) -> bytes:
    """An OPUS-style moses zip: ``{corpus}.{l1}-{l2}.{l1}``/``.{l2}`` (sorted), README, LICENSE,
    ``.ids`` and ``.xml``, plus ``extra_members`` (raw names, so tests can add hostile ones)."""
    first, second = sorted((lang_a, lang_b))
    pair = f"{first}-{second}"
    sides = {lang_a: lines_a, lang_b: lines_b}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("README", f"{corpus} test corpus\n")
        archive.writestr("LICENSE", "public domain\n")
        for lang in (first, second):
            body = b"".join(
                (line if isinstance(line, bytes) else line.encode()) + b"\n" for line in sides[lang]
            )
            archive.writestr(f"{corpus}.{pair}.{lang}", body)
        archive.writestr(f"{corpus}.{pair}.ids", "".join(f"{i}\t{i}\n" for i in range(3)))
        archive.writestr(f"{corpus}.{pair}.xml", "<xml/>\n")
        for name, data in (extra_members or {}).items():
            archive.writestr(zipfile.ZipInfo(name), data)
    return buffer.getvalue()


class OpusServer:
    """A threaded HTTP server on 127.0.0.1 (port chosen by the OS)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.corpora: list[dict] = []
        self.faults: dict[str, list[Fault]] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        self.advertised_base: str | None = None
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def api_url(self) -> str:
        return f"{self.base_url}/opusapi/"

    def start(self) -> OpusServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def add_file(self, path: str, data: bytes) -> str:
        """Serve ``data`` at ``path``; return its full URL."""
        self.files[path] = data
        return self.base_url + path

    def add_corpus(
        self, corpus: str, version: str, lang_a: str, lang_b: str, zip_bytes: bytes
    ) -> str:
        """List the corpus in the API answer and serve its zip; return the zip's path."""
        first, second = sorted((lang_a, lang_b))
        path = f"/OPUS-{corpus}/{version}/moses/{first}-{second}.txt.zip"
        self.add_file(path, zip_bytes)
        self.corpora.append(
            {"corpus": corpus, "version": version, "source": first, "target": second, "path": path}
        )
        return path

    def fail(self, path: str, *faults: Fault) -> None:
        """Queue faults for the next requests to ``path`` (each for its ``times``)."""
        self.faults.setdefault(path, []).extend(faults)

    def count(self, path: str | None = None, method: str = "GET") -> int:
        """How many ``method`` requests were made (to ``path``, or to anything)."""
        with self._lock:
            return sum(1 for m, p, _ in self.requests if m == method and path in (None, p))

    def ranges(self, path: str) -> list[str | None]:
        """The Range header of each GET of ``path``, in order."""
        with self._lock:
            return [r for m, p, r in self.requests if m == "GET" and p == path]

    def _next_fault(self, path: str) -> Fault | None:
        with self._lock:
            queue = self.faults.get(path, [])
            if not queue:
                return None
            fault = queue[0]
            fault.times -= 1
            if fault.times <= 0:
                queue.pop(0)
            return fault

    def api_answer(self, query: dict[str, list[str]]) -> dict:
        def arg(name: str) -> str:
            return query.get(name, [""])[0]

        first, second = sorted((arg("source"), arg("target")))
        base = self.advertised_base or self.base_url
        entries = []
        for entry in self.corpora:
            if (
                entry["corpus"] == arg("corpus")
                and arg("version") in ("latest", entry["version"])
                and (entry["source"], entry["target"]) == (first, second)
            ):
                size = len(self.files[entry["path"]])
                entries.append(
                    {
                        "alignment_pairs": 3,
                        "corpus": entry["corpus"],
                        "documents": "",
                        "id": len(entries) + 1,
                        "latest": "True",
                        "preprocessing": "moses",
                        "size": max(1, size // 1024),
                        "source": entry["source"],
                        "target": entry["target"],
                        "url": base + entry["path"],
                        "version": entry["version"],
                    }
                )
        return {"corpora": entries}


def _make_handler(server: OpusServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

        def do_HEAD(self) -> None:  # noqa: N802
            self._answer(head=True)

        def do_GET(self) -> None:  # noqa: N802
            self._answer(head=False)

        def _send(self, status: int, body: bytes, headers: dict[str, str], head: bool) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _answer(self, head: bool) -> None:
            url = urlsplit(self.path)
            with server._lock:
                server.requests.append((self.command, url.path, self.headers.get("Range")))
            if url.path.rstrip("/") == "/opusapi":
                body = json.dumps(server.api_answer(parse_qs(url.query))).encode()
                self._send(200, body, {"Content-Type": "application/json"}, head)
                return
            fault = server._next_fault(url.path)
            data = server.files.get(url.path)
            if data is None or (fault and fault.status):
                status = fault.status if fault and fault.status else 404
                self._send(status, f"error {status}\n".encode(), {}, head)
                return
            if fault and fault.truncate_to is not None:
                data = data[: fault.truncate_to]
            etag = '"' + hashlib.sha1(data).hexdigest() + '"'
            start = 0
            requested = _RANGE.match(self.headers.get("Range", ""))
            if_range = self.headers.get("If-Range")
            if requested and not (fault and fault.ignore_range) and if_range in (None, etag):
                start = int(requested.group(1))
            headers = {"ETag": etag, "Accept-Ranges": "bytes"}
            if start >= len(data) and start:
                headers["Content-Range"] = f"bytes */{len(data)}"
                self._send(416, b"", headers, head)
                return
            status = 200
            if start:
                status = 206
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            body = data[start:]
            if fault and fault.drop_after is not None and not head:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: fault.drop_after])
                self.wfile.flush()
                self.close_connection = True
                return
            if fault and fault.pause and not head:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                time.sleep(fault.pause)
                self.wfile.write(body[len(body) // 2 :])
                return
            self._send(status, body, headers, head)

    return Handler

"""A loopback HTTP server that speaks the OPUS API and serves files, with injectable faults.

Start one per test (``OpusServer().start()``, or the ``opus_server`` fixture in conftest.py),
register zips built from generated text with :meth:`OpusServer.add_corpus` (or any bytes with
:meth:`OpusServer.add_file`), queue faults per path with :meth:`OpusServer.fail`, and count the
requests it saw with :meth:`OpusServer.count`. The real ``requests`` code talks to it over TCP.

Served paths mirror OPUS: zips live at ``/OPUS-{corpus}/{version}/moses/{l1}-{l2}.txt.zip``,
and ``/opusapi/`` answers as the real API does (the format and semantics of
``fixtures/opusapi_opensubtitles_en_zh.json``, see ``fixtures/README.md``):

* ``?source=..&target=..&corpus=..&version=..&preprocessing=..`` gives ``{"corpora": [...]}``,
  entries with the real field set (:data:`ENTRY_FIELDS`; ``size`` in KB, ``latest`` the string
  ``"True"`` only on the corpus's newest release). Every parameter given is an exact,
  case-sensitive match; source and target are sorted first; ``version=latest`` selects the
  newest release; unknown parameters are ignored. Each registered release is listed with its
  moses zip and, like OPUS, an xml and a tmx file (listed, not served), so a client that does
  not filter on ``preprocessing`` gets the wrong URL.
* ``?languages=True&source=en&corpus=..&version=..`` gives ``{"languages": [...]}``: the codes
  paired with ``source`` in the matching releases.
* ``?corpora=True`` gives ``{"corpora": [names]}``.

Not modelled: monolingual entries and the sentence files the real API adds to xml answers.

File answers support ``Range`` (206), ``If-Range`` (a stale validator gets the whole file),
``416`` past the end, and an ETag.
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
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from tests.loopback_http import QuietHTTPServer

_RANGE = re.compile(r"bytes=(\d+)-$")
_VERSION_PART = re.compile(r"(\d+)|(\D+)")

#: The fields of an entry of the API's ``corpora`` list, in the API's order.
ENTRY_FIELDS = (
    "alignment_pairs",
    "corpus",
    "documents",
    "id",
    "latest",
    "preprocessing",
    "size",
    "source",
    "source_tokens",
    "target",
    "target_tokens",
    "url",
    "version",
)
#: The query parameters the API reads; it ignores any other.
API_PARAMETERS = frozenset(
    {
        "corpus",
        "id",
        "latest",
        "preprocessing",
        "source",
        "target",
        "version",
        "corpora",
        "languages",
    }
)
#: The files the API lists for each release of a language pair: (preprocessing, path suffix).
LISTED_FILES = (("moses", "txt.zip"), ("tmx", "tmx.gz"), ("xml", "xml.gz"))


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
        #: corpus -> the release ``version=latest`` selects (unset: the highest registered)
        self.latest_release: dict[str, str] = {}
        self._lock = threading.Lock()
        self._httpd = QuietHTTPServer(("127.0.0.1", 0), _make_handler(self))
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
        self,
        corpus: str,
        version: str,
        lang_a: str,
        lang_b: str,
        zip_bytes: bytes,
        *,
        alignment_pairs: int | None = None,
    ) -> str:
        """List the release in the API answers and serve its moses zip; return the zip's path.

        ``alignment_pairs`` (default: the lines of the zip's first-language member) and the
        token counts listed come from the zip when it can be read, else 0.
        """
        first, second = sorted((lang_a, lang_b))
        path = f"/OPUS-{corpus}/{version}/moses/{first}-{second}.txt.zip"
        self.add_file(path, zip_bytes)
        counts = _zip_counts(zip_bytes, corpus, first, second)
        if alignment_pairs is not None:
            counts["alignment_pairs"] = alignment_pairs
        self.corpora.append(
            {"corpus": corpus, "version": version, "source": first, "target": second, "path": path}
            | counts
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

    def newest_release(self, corpus: str) -> str | None:
        """The release a ``latest`` query selects: ``latest_release[corpus]`` when set, else the
        highest registered version (``v2`` < ``v10``, ``v2017q3`` < ``v2018``)."""
        if corpus in self.latest_release:
            return self.latest_release[corpus]
        versions = [e["version"] for e in self.corpora if e["corpus"] == corpus]
        return max(versions, key=_version_key) if versions else None

    def entries(self) -> list[dict]:
        """Every listed file as an API entry (the moses zip, tmx and xml of each release)."""
        base = self.advertised_base or self.base_url
        entries = []
        for index, release in enumerate(self.corpora):
            latest = release["version"] == self.newest_release(release["corpus"])
            pair = f"{release['source']}-{release['target']}"
            for offset, (preprocessing, suffix) in enumerate(LISTED_FILES):
                if preprocessing == "moses":
                    path, size = release["path"], len(self.files.get(release["path"], b""))
                else:
                    path = f"/OPUS-{release['corpus']}/{release['version']}/{preprocessing}/"
                    path += f"{pair}.{suffix}"
                    size = 2 * len(self.files.get(release["path"], b""))
                entry = {
                    "alignment_pairs": release["alignment_pairs"],
                    "corpus": release["corpus"],
                    "documents": 1 if preprocessing == "xml" else "",
                    "id": 3 * index + offset + 1,
                    "latest": str(latest),
                    "preprocessing": preprocessing,
                    "size": size // 1024,
                    "source": release["source"],
                    "source_tokens": release["source_tokens"],
                    "target": release["target"],
                    "target_tokens": release["target_tokens"],
                    "url": base + path,
                    "version": release["version"],
                }
                entries.append({name: entry[name] for name in ENTRY_FIELDS})
        return entries

    def api_answer(self, query: dict[str, list[str]]) -> dict:
        """The API's answer to a parsed query string."""
        params = {
            name: values[0].replace('"', "").replace("'", "")
            for name, values in query.items()
            if name in API_PARAMETERS
        }
        if params.pop("corpora", None) is not None:
            return {"corpora": sorted({e["corpus"] for e in _select(self.entries(), params)})}
        if params.pop("languages", None) is not None:
            return {"languages": _languages(self.entries(), params)}
        source = params.get("source")
        entries = _select(self.entries(), params)
        if source and not params.get("target"):  # the language on the target side too
            swapped = {k: v for k, v in params.items() if k != "source"} | {"target": source}
            entries = _select(self.entries(), swapped) + entries
        return {"corpora": entries}


def _version_key(version: str) -> tuple:
    return tuple(
        (0, int(number), "") if number else (1, 0, text)
        for number, text in _VERSION_PART.findall(version)
    )


def _match(params: dict[str, str]) -> dict[str, str]:
    """Query parameters as the API compares them: ``version=latest`` becomes ``latest=True``,
    source and target sorted."""
    params = dict(params)
    if params.get("version") == "latest":
        del params["version"]
        params["latest"] = "True"
    if params.get("source") and params.get("target"):
        params["source"], params["target"] = sorted((params["source"], params["target"]))
    return params


def _select(entries: list[dict], params: dict[str, str]) -> list[dict]:
    """The entries whose fields equal every parameter (exact, case-sensitive)."""
    params = _match(params)
    return [e for e in entries if all(str(e[k]) == v for k, v in params.items())]


def _languages(entries: list[dict], params: dict[str, str]) -> list[str]:
    """The codes paired with ``source`` in the matching entries (every source code without)."""
    params = _match(params)
    source = params.pop("source", None)
    if not source:
        return sorted({e["source"] for e in _select(entries, params)})
    as_source = _select(entries, params | {"source": source})
    as_target = _select(entries, params | {"target": source})
    codes = {e["target"] for e in as_source if e["target"] not in ("", source)}
    return sorted(codes | {e["source"] for e in as_target})


def _zip_counts(zip_bytes: bytes, corpus: str, first: str, second: str) -> dict[str, int]:
    """Line and token counts of a moses zip's two sides (0 where the zip cannot be read)."""
    counts = {"alignment_pairs": 0, "source_tokens": 0, "target_tokens": 0}
    try:
        with zipfile.ZipFile(io.BytesIO(zip_bytes)) as archive:
            pair = f"{first}-{second}"
            for lang, key in ((first, "source_tokens"), (second, "target_tokens")):
                lines = archive.read(f"{corpus}.{pair}.{lang}").splitlines()
                counts["alignment_pairs"] = len(lines)
                counts[key] = sum(len(line.split()) for line in lines)
    except (zipfile.BadZipFile, KeyError, OSError):
        pass
    return counts


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

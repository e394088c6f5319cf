"""The loopback HTTP servers of the tests: Python's threading server, without its report of a
client that hung up mid-request (the fault tests cut connections on purpose; the report is a
stray line in `make test`'s progress, and what the client saw is what the tests assert)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass


@contextmanager
def serving_folder(folder: Path) -> Iterator[str]:
    """A loopback HTTP server of ``folder``'s files for the block; yields its URL."""
    handler = partial(SimpleHTTPRequestHandler, directory=str(folder))
    server = QuietHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

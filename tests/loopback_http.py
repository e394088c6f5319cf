"""The loopback HTTP servers of the tests: Python's threading server, without its report of a
client that hung up mid-request (the fault tests cut connections on purpose; the report is a
stray line in `make test`'s progress, and what the client saw is what the tests assert)."""

from __future__ import annotations

from http.server import ThreadingHTTPServer


class QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass

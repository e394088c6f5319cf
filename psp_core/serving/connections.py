"""uvicorn's httptools protocol with the connection limits of :class:`~psp_core.serving.limits.Limits`.

uvicorn's fastest HTTP/1.1 protocol (httptools) bounds neither the size nor the number of a
request's headers, never times out a connection that has sent nothing or half a request, and
accepts connections until the process runs out of files, after which every client gets an
empty reply. This subclass adds, per connection:

* header bytes and count: beyond either, 431 and the connection closed (the bytes are counted as
  they arrive, so a flood of headers costs at most one read beyond the limit);
* a connection idle for ``keep_alive_timeout`` (before its first request or between two) is
  closed, as uvicorn already does after a response;
* a request not received whole within ``request_timeout`` of its first byte gets 408 and the
  connection is closed;
* an answer its client stops reading (the connection's send buffer full, none of it taken for
  ``send_timeout``) is dropped with its connection: a client that never reads cannot hold the
  memory of its answers;
* beyond ``max_connections`` open in the process, a new connection gets 503 (with
  ``Retry-After``) and is closed at once, so the others are still served.

Each of these refusals is a JSON error in OpenAI's shape, as the app's own are.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import json
import resource
import socket
import struct

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from psp_core.serving.limits import Limits

#: files a process keeps open beside its connections (models, logs, pipes, the listening socket)
SPARE_FILES = 64


class _Refused(Exception):
    """Raised from a parser callback: the request broke a limit (the status says which)."""


#: the ``code`` of each refusal this protocol answers itself (before the app sees the request)
REFUSAL_CODES = {
    408: "request_timeout",
    413: "request_too_large",
    431: "request_headers_too_large",
    503: "server_overloaded",
}


def guarded_protocol(limits: Limits) -> type[HttpToolsProtocol]:
    """The protocol class to give uvicorn (``Config(http=...)``), bound to ``limits``."""
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {"limits": limits})


def ensure_file_limit(max_connections: int) -> None:
    """Raise the process's soft limit of open files to hold ``max_connections`` (up to the hard
    limit); a clear error when the hard limit is lower."""
    need = max_connections + SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise ValueError(
                f"--max-connections {max_connections} needs {need} open files; this process may "
                f"open {hard} (ulimit -Hn): lower --max-connections"
            )
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    limits: Limits = Limits()

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.timeout_keep_alive = self.limits.keep_alive_timeout
        self._head_bytes = 0  # bytes received of the current request's line and headers
        self._header_count = 0
        self._in_body = False
        self._request_timer: asyncio.TimerHandle | None = None
        self._refusal: tuple[int, str] | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._unsent = 0  # what the send buffer held when the send timer was last set
        self._held_answer = False  # whether an answer ever waited for this client to read

    def connection_made(self, transport) -> None:  # type: ignore[override]
        # uvicorn closes through this: a close while a request's body is still arriving (a
        # refusal answered early) reads a little of the rest first, never more
        super().connection_made(_DrainingTransport(transport, self))
        if len(self.connections) > self.limits.max_connections:
            self._refuse(503, f"over {self.limits.max_connections} open connections; try again")
            return
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_request_timer()
        if self._held_answer:  # a large answer's memory freed: the allocator may give it back
            give_back_freed_memory(self.loop)
        self._cancel_send_timer()
        super().connection_lost(exc)

    def pause_writing(self) -> None:  # the send buffer is full: the client must take some
        self._held_answer = True
        super().pause_writing()
        if self._send_timer is None:
            self._set_send_timer()

    def resume_writing(self) -> None:
        self._cancel_send_timer()
        super().resume_writing()

    def _set_send_timer(self) -> None:
        self._unsent = self.transport.get_write_buffer_size()
        self._send_timer = self.loop.call_later(self.limits.send_timeout, self._send_timed_out)

    def _cancel_send_timer(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_timed_out(self) -> None:
        """The client took nothing of its answer for ``send_timeout`` (it is still slowly reading
        when some was taken: the wait starts again, as nginx's ``send_timeout`` does)."""
        if self.transport.get_write_buffer_size() < self._unsent:
            self._set_send_timer()
            return
        self._send_timer = None
        self.logger.info(
            "%s:%d - answer not read within %g s: connection dropped",
            *(self.client or ("?", 0)),
            self.limits.send_timeout,
        )
        # a reset, not a close: the system drops what it still holds of the answer (a close
        # would have it sent on, however slowly the client takes it), as nginx's
        # reset_timedout_connection does
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()  # (close() would wait to send the buffer first)

    def data_received(self, data: bytes) -> None:
        # (uvicorn's own, with the limits; a broken limit is not logged as an invalid request)
        if self.transport.draining:
            self.transport.drained(len(data))
            return
        if self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        if not self._in_body:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if self._refusal is not None:  # a limit broken in a parser callback
                self._refuse(*self._refusal)
            else:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        if not self._in_body and self._head_bytes > self.limits.max_header_bytes:
            self._refuse(431, f"request headers over {self.limits.max_header_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_count = 0
        if self._request_timer is None:
            self._request_timer = self.loop.call_later(
                self.limits.request_timeout, self._request_timed_out
            )

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            self._refusal = (431, f"over {self.limits.max_headers} request headers")
            raise _Refused(self._refusal[1])
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_body = True
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_body = False
        self._head_bytes = 0
        self._cancel_request_timer()
        super().on_message_complete()

    def _cancel_request_timer(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def on_response_complete(self) -> None:
        if self.body_pending():  # answered before the body was read whole (a refusal): no
            self.transport.close()  # keep-alive waits for the rest; a bounded drain, closed
            return
        super().on_response_complete()

    def body_pending(self) -> bool:
        """Whether the current request's body is still arriving (its end not received)."""
        return self.cycle is not None and self.cycle.more_body and self._in_body

    def _request_timed_out(self) -> None:
        self._request_timer = None
        if self.transport.is_closing():
            return
        if self._in_body and self.cycle.response_started:
            self.transport.close()  # (the app answered early, the client never sent the rest)
        else:
            self._refuse(408, f"request not received within {self.limits.request_timeout:g} s")

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` with the reason as an OpenAI-shaped JSON error (as every other
        error of the server) and close the connection; a 503 (too many connections) says when
        to try again (``Retry-After``)."""
        self._cancel_request_timer()
        kind = "invalid_request_error" if status < 500 else "server_error"
        error = {"message": message, "type": kind, "param": None, "code": REFUSAL_CODES[status]}
        body = json.dumps({"error": error}).encode("ascii")
        self.transport.write(
            b"".join(
                [
                    STATUS_LINE[status],
                    b"content-type: application/json\r\n",
                    b"content-length: %d\r\n" % len(body),
                    b"retry-after: 1\r\n" if status == 503 else b"",
                    b"connection: close\r\n\r\n",
                    body,
                ]
            )
        )
        self.transport.close()


#: what a refused request may still send before its connection closes: enough for the client
#: to be reading the answer when the close comes (a close with unread bytes resets the
#: connection, which can lose the answer), far less than a body could be
DRAIN_BYTES = 64 * 1024
DRAIN_SECONDS = 1.0


class _DrainingTransport:
    """The connection's transport as uvicorn sees it, whose ``close`` while the request's body is
    still arriving (the answer was a refusal: 401, 413, 408...) ends the write side, reads and
    drops at most :data:`DRAIN_BYTES` more for at most :data:`DRAIN_SECONDS`, then closes: a
    client that goes on sending costs no more than that."""

    def __init__(self, transport: asyncio.Transport, protocol: GuardedHttpToolsProtocol) -> None:
        self._transport, self._protocol = transport, protocol
        self.draining, self._left = False, DRAIN_BYTES
        self._timer: asyncio.TimerHandle | None = None

    def __getattr__(self, name: str):
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.draining or self._transport.is_closing()

    def close(self) -> None:
        if self.draining or self._transport.is_closing():
            return
        if not self._protocol.body_pending():
            self._transport.close()
            return
        self.draining = True
        if self._transport.can_write_eof():
            self._transport.write_eof()  # (the answer is whole: the client may read it)
        self._transport.resume_reading()
        self._timer = self._protocol.loop.call_later(DRAIN_SECONDS, self._close_now)

    def drained(self, count: int) -> None:
        self._left -= count
        if self._left <= 0:
            self._close_now()

    def _close_now(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._transport.close()


#: seconds between two requests to the allocator to give freed memory back to the system
TRIM_DELAY = 1.0
_trim_pending: list[asyncio.TimerHandle] = []


def give_back_freed_memory(loop: asyncio.AbstractEventLoop) -> None:
    """Ask glibc's allocator, once within :data:`TRIM_DELAY`, to return the free memory it keeps
    to the system (``malloc_trim``): the large answers of a process's connections are freed in
    its worker threads' arenas, which glibc otherwise keeps for the next requests (pyarrow
    allocates there too in a server: server.allocate_arrow_from_malloc). Nothing where the C
    library is not glibc."""
    if _trim_pending or _malloc_trim is None:
        return
    _trim_pending.append(loop.call_later(TRIM_DELAY, _trim))


def _trim() -> None:
    _trim_pending.clear()
    _malloc_trim(0)


def _glibc_malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to ask
        return None


_malloc_trim = _glibc_malloc_trim()

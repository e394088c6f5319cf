"""What a client of ``psp serve`` may ask for: one request's memory and time, and one process's
connections and requests in flight, stay bounded whatever clients send.

Each limit is a ``psp serve`` flag (docs/serving.md lists them with these defaults). The
request limits are checked by the app (:mod:`psp_core.serving.app`), the connection limits by the
HTTP protocol (:mod:`psp_core.serving.connections`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    #: inputs in one request (OpenAI's own limit)
    max_inputs: int = 2048
    #: characters of one input (a model reads its first max_length pieces anyway)
    max_input_chars: int = 65_536
    #: bytes of one request body
    max_body_bytes: int = 16 << 20
    #: bytes of one request's line and headers (431 beyond)
    max_header_bytes: int = 32 << 10
    #: headers of one request (431 beyond)
    max_headers: int = 100
    #: seconds a connection may stay open without a request in progress, before its first
    #: request and between two (then it is closed)
    keep_alive_timeout: float = 5.0
    #: seconds from a request's first byte to its last (408 and closed beyond: a slow sender
    #: cannot hold a connection)
    request_timeout: float = 30.0
    #: seconds an answer may wait for its client to take any of it, once the connection's send
    #: buffer is full (then the connection is dropped, with what it still held)
    send_timeout: float = 30.0
    #: open connections of one process; beyond it a new one is answered 503 and closed at once
    max_connections: int = 1024
    #: embeddings requests in progress in one process; beyond it 429 with ``Retry-After``
    max_concurrent_requests: int = 128
    #: memory of one process's word caches, its models' together (what it remembers across
    #: requests: words, their pieces and their vectors' sums; half each)
    word_cache_bytes: int = 256 << 20

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value > 0:
                raise ValueError(f"{name.replace('_', '-')} must be positive, got {value}")

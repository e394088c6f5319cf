"""Which failures a later attempt may fix: the network's, never a 404, a bad setting or a bad file.

The download stage is retried (with pauses of minutes) only for errors :func:`is_transient`
accepts: a connection that failed or timed out, an HTTP 408, 429 or 5xx answer. A 404 or other
refusal, a corpus the OPUS API does not list, a corrupt zip, a missing registry entry or a bad
setting give the same answer every time, so they fail at once.
"""

from __future__ import annotations

import requests

#: HTTP answers worth asking again later: request timeout, too many requests, server errors.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def is_transient(error: BaseException) -> bool:
    """True if ``error`` may pass by itself, so that retrying later can succeed.

    An error with a ``transient`` attribute (:class:`psp_core.files.download.DownloadError`) decides
    for itself. Otherwise ``requests`` connection errors and timeouts (not TLS errors), HTTP
    errors with a status in :data:`TRANSIENT_STATUSES`, and the built-in ``ConnectionError`` and
    ``TimeoutError`` are transient; an error raised ``from`` another (``OpusError`` wrapping a
    failed API request) is judged by that cause; everything else is not.
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        transient = getattr(error, "transient", None)
        if transient is not None:
            return bool(transient)
        if isinstance(error, requests.HTTPError):
            response = error.response
            return response is not None and response.status_code in TRANSIENT_STATUSES
        if isinstance(error, requests.exceptions.SSLError):
            return False
        if isinstance(
            error,
            (
                requests.ConnectionError,
                requests.Timeout,
                requests.exceptions.ChunkedEncodingError,
                ConnectionError,
                TimeoutError,
            ),
        ):
            return True
        error = error.__cause__
    return False

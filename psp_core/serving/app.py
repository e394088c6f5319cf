"""``psp serve``: the OpenAI embeddings API (``POST /v1/embeddings``, ``GET /v1/models``) over
the served models (:class:`~psp_core.serving.models.ModelSet`), on Starlette and uvicorn.

Vectors are unit length, as OpenAI's are (cosine = dot product), of the first ``dimensions``
dimensions when asked (a Matryoshka prefix, normalized after cutting). ``encoding_format``
``base64`` sends the float32 bytes little-endian, as the ``openai`` client reads them (its
default): 4 bytes a dimension where JSON floats take about 20. ``usage`` counts sentencepiece
pieces. Each answer names the model version that computed it (``X-PSP-Model-Version``). Bad
requests get a 4xx JSON error in OpenAI's shape (``{"error": {"message", "type", "param",
"code"}}``) and the server goes on: an input that is empty or blank, or has nothing to embed,
is refused (a zero vector cannot be unit length). Limits (inputs per request, characters per
input, body size, requests in progress) keep the memory bounded.

With API keys, every route but ``/health`` asks for one (``Authorization: Bearer KEY``, compared
in constant time; 401 ``invalid_api_key`` otherwise). The embeddings route takes
``application/json`` bodies only (415 otherwise: a browser page cannot send one across origins
without a CORS preflight), and CORS headers are sent only for the origins given.

A large request is embedded in pieces of bounded work, each in a worker thread, so that the
event loop answers small requests between two pieces (a small request is never stuck behind a
large one: benchmarks/RESULTS.md#serve-fairness); between pieces it stops if its client hung up.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import os
import urllib.parse

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from psp_core.serving.limits import Limits
from psp_core.serving.models import ModelSet, Served

log = logging.getLogger(__name__)


#: requests of at most these inputs and characters are embedded on the event loop itself
#: (quicker than the hop to a worker thread); larger ones go to worker threads, a piece at a
#: time, so the loop keeps reading and answering other requests meanwhile
INLINE_INPUTS = 4
INLINE_CHARACTERS = 2_000
#: the most inputs and characters of one piece of a large request (one input longer than that
#: is a piece of its own): small enough that a request waiting for the loop waits little
PIECE_INPUTS = 256
PIECE_CHARACTERS = 32_000
#: the header that names the model version of an answer
VERSION_HEADER = "X-PSP-Model-Version"
#: where the embeddings API answers
EMBEDDINGS_PATHS = ("/v1/embeddings", "/v1/embeddings/", "/embeddings", "/embeddings/")
#: the routes open without an API key
OPEN_PATHS = frozenset({"/health"})


class RecentFailures:
    """Embeddings requests that failed (a 500) since the last one that succeeded: while the last
    one failed, ``/health`` says ``degraded`` and why, even though the models load."""

    def __init__(self) -> None:
        self.count, self.last = 0, ""

    def failed(self, what: str) -> None:
        self.count, self.last = self.count + 1, what

    def succeeded(self) -> None:
        self.count = 0

    def problems(self) -> dict[str, str]:
        if not self.count:
            return {}
        return {
            "requests": f"the last {self.count} embeddings request(s) failed ({self.last[:200]})"
        }


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers

    def response(self) -> JSONResponse:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        body = {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        return JSONResponse({"error": body}, status_code=self.status, headers=self.headers)


def create_app(
    models: ModelSet,
    limits: Limits | None = None,
    lifespan=None,
    *,
    api_keys: tuple[str, ...] = (),
    cors_origins: tuple[str, ...] = (),
) -> Starlette:
    limits = limits or Limits()
    in_progress = [0]  # embeddings requests of this process being answered (one event loop)
    failures = RecentFailures()

    async def embeddings(request: Request) -> Response:
        if in_progress[0] >= limits.max_concurrent_requests:
            return ApiError(
                429,
                f"over {limits.max_concurrent_requests} requests in progress; retry in 1 s",
                code="rate_limit_exceeded",
                headers={"Retry-After": "1"},
            ).response()
        in_progress[0] += 1
        try:
            answer = await _answer(request, models, limits)
            failures.succeeded()
            return answer
        except ApiError as error:
            return error.response()
        except ClientDisconnect:  # nobody to answer: its work stopped, nothing to log
            return Response(status_code=499)
        finally:
            in_progress[0] -= 1

    async def list_models(request: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [_model_card(models.get(n)) for n in models.names()]}
        )

    async def one_model(request: Request) -> Response:
        served = models.get(request.path_params["name"])
        if served is None:
            return _unknown_model(request.path_params["name"], models).response()
        return JSONResponse(_model_card(served))

    async def health(request: Request) -> Response:
        """``ok``; ``degraded`` (still 200) when a model serves an older version than the one
        promoted or its files are gone or damaged on disk, each reason in ``problems``; 503
        ``unavailable`` only when no model can be served."""
        served = {name: models.get(name).version for name in models.names()}
        problems = {**models.problems(), **failures.problems()}
        status = "degraded" if problems else "ok"
        if not served:
            status = "unavailable"
        return JSONResponse(
            {
                "status": status,
                "models": served,
                "problems": problems,
                "swaps": models.swaps,
                "pid": os.getpid(),  # which process answered (psp serve --workers)
            },
            status_code=503 if not served else 200,
        )

    async def http_error(request: Request, error: HTTPException) -> Response:
        return ApiError(
            error.status_code, f"{request.method} {request.url.path}: {error.detail}"
        ).response()

    async def server_error(request: Request, error: Exception) -> Response:
        log.exception("%s %s failed", request.method, request.url.path)
        failures.failed(f"{type(error).__name__}: {error}")
        return ApiError(500, f"internal error: {type(error).__name__}").response()

    routes = [
        # (with a trailing slash too: served, never redirected to a URL built from the client's
        # Host header)
        *(Route(path, embeddings, methods=["POST"]) for path in EMBEDDINGS_PATHS),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{name}", one_model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
    middleware = [Middleware(CloseWhenRefused)]  # outermost: sees every refusal
    if cors_origins:  # outermost: a preflight carries no key, and a 401 gets the headers too
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
                expose_headers=[VERSION_HEADER],
            )
        )
    if api_keys:
        middleware.append(Middleware(KeyCheck, keys=api_keys))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    app.router.redirect_slashes = False  # any other path: 404 in OpenAI's shape, no redirect
    return app


class CloseWhenRefused:
    """ASGI middleware: an error (4xx, 5xx) answered while the request's body is still arriving
    says ``Connection: close`` (the server then reads little more of it: connections.py), so a
    client told 401 or 413 stops sending rather than the server reading on."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length", b"0")
        pending = [b"transfer-encoding" in headers or (length.isdigit() and int(length) > 0)]

        async def receive_tracked():
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                pending[0] = False
            return message

        async def send_closing(message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400 and pending[0]:
                message = {**message, "headers": [*message.get("headers", []), CLOSE_HEADER]}
            await send(message)

        await self.app(scope, receive_tracked, send_closing)


CLOSE_HEADER = (b"connection", b"close")


class KeyCheck:
    """ASGI middleware: a request to any route but :data:`OPEN_PATHS` must bear one of ``keys``
    as ``Authorization: Bearer KEY``, else 401 (the key given is never echoed nor logged)."""

    def __init__(self, app, keys: tuple[str, ...]) -> None:
        if not keys or not all(keys):
            raise ValueError("API keys must be non-empty strings")
        self.app = app
        self.keys = [key.encode() for key in keys]

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        refusal = ApiError(
            401,
            "a valid API key is required: send it as the header 'Authorization: Bearer KEY'",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )
        await refusal.response()(scope, receive, send)

    def _allowed(self, scope) -> bool:
        given = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
        scheme, _, token = given.partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        token = token.strip()
        matched = False
        for key in self.keys:  # every key compared: the time does not tell which one matched
            matched |= hmac.compare_digest(token, key)
        return matched


async def _answer(request: Request, models: ModelSet, limits: Limits) -> Response:
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":
        raise ApiError(
            415,
            f"the request body must be sent as Content-Type: application/json, "
            f"not {media_type or 'none'}",
        )
    body = await _json_body(request, limits.max_body_bytes)
    served, texts, dimensions, encoding = _parse(body, models, limits)
    pieces = _pieces(texts)
    headers = {VERSION_HEADER: header_value(served.version)}
    if len(texts) <= INLINE_INPUTS and sum(map(len, texts)) <= INLINE_CHARACTERS:
        # a few short inputs take less time than the hop to a worker thread
        part, count = _piece(served, texts, 0, dimensions, encoding, True)
    elif len(pieces) == 1:
        part, count = await run_in_threadpool(_piece, served, texts, 0, dimensions, encoding, True)
    else:
        vectors, count = await _in_pieces(request, served, texts, pieces, dimensions)
        return StreamedAnswer(vectors, pieces, served.name, count, encoding, headers)
    return Response(
        _envelope([part], served.name, count), media_type="application/json", headers=headers
    )


def header_value(text: str) -> str:
    """``text`` as a valid HTTP header value: printable ASCII as it is, anything else (a
    folder named by hand with accents or a line break) percent-encoded."""
    if text.isascii() and text.isprintable():
        return text
    return urllib.parse.quote(text, safe="")


async def _json_body(request: Request, max_bytes: int):
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise ApiError(413, f"request body of {declared} bytes; the limit is {max_bytes}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise ApiError(413, f"request body over the limit of {max_bytes} bytes")
        chunks.append(chunk)
    try:
        return orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as error:
        raise ApiError(400, f"the request body is not valid JSON ({error})") from error


def _unknown_model(name, models: ModelSet) -> ApiError:
    return ApiError(
        404,
        f"the model {name!r} does not exist here; served: {', '.join(models.names())}",
        "model",
        "model_not_found",
    )


def _parse(body, models: ModelSet, limits: Limits) -> tuple[Served, list[str], int | None, str]:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    name = body.get("model")
    if not isinstance(name, str):
        raise ApiError(400, "'model' must be a string: a language code or 'multi'", "model")
    served = models.get(name)
    if served is None:
        raise _unknown_model(name, models)
    texts = _inputs(body.get("input"), limits)
    dimensions = body.get("dimensions")
    if dimensions is not None and (
        isinstance(dimensions, bool)
        or not isinstance(dimensions, int)
        or not 1 <= dimensions <= served.model.dim
    ):
        raise ApiError(
            400, f"'dimensions' must be an integer in [1, {served.model.dim}]", "dimensions"
        )
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise ApiError(400, "'encoding_format' must be 'float' or 'base64'", "encoding_format")
    return served, texts, dimensions, encoding


def _inputs(value, limits: Limits) -> list[str]:
    if isinstance(value, str):
        texts = [value]
    elif isinstance(value, list):
        if not value:
            raise ApiError(400, "'input' is an empty list: give at least one string", "input")
        if any(isinstance(item, int | list) and not isinstance(item, bool) for item in value):
            raise ApiError(
                400,
                "token ids are not accepted: send text (this model has its own tokenizer)",
                "input",
            )
        if not all(isinstance(item, str) for item in value):
            raise ApiError(400, "'input' must be a string or a list of strings", "input")
        texts = value
    else:
        raise ApiError(400, "'input' must be a string or a list of strings", "input")
    if len(texts) > limits.max_inputs:
        raise ApiError(
            400, f"{len(texts)} inputs in one request; the limit is {limits.max_inputs}", "input"
        )
    for index, text in enumerate(texts):
        if len(text) > limits.max_input_chars:
            raise ApiError(
                400,
                f"input {index} has {len(text)} characters; the limit is {limits.max_input_chars}",
                "input",
            )
        if not text.strip():
            raise ApiError(
                400, f"input {index} is empty or blank: each input must have text", "input"
            )
    return texts


def _pieces(texts: list[str]) -> list[tuple[int, int]]:
    """``(start, stop)`` ranges of ``texts`` in order, each of at most :data:`PIECE_INPUTS`
    inputs and :data:`PIECE_CHARACTERS` characters (or one longer input alone)."""
    ranges, start, characters = [], 0, 0
    for index, text in enumerate(texts):
        if index > start and (
            index - start >= PIECE_INPUTS or characters + len(text) > PIECE_CHARACTERS
        ):
            ranges.append((start, index))
            start, characters = index, 0
        characters += len(text)
    ranges.append((start, len(texts)))
    return ranges


async def _in_pieces(
    request: Request,
    served: Served,
    texts: list[str],
    pieces: list[tuple[int, int]],
    dimensions: int | None,
) -> tuple[list[np.ndarray], int]:
    """The unit vectors of a large request, a piece at a time in worker threads, and their piece
    count; ClientDisconnect as soon as its client is gone (no more pieces started)."""
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        # the word cache's choice made once for the request: asked piece by piece, a piece no
        # larger than its probe would always go through the cache, paying off or not
        cached = await run_in_threadpool(_cache_rows, served, texts)
        vectors, count = [], 0
        for start, stop in pieces:
            if gone.done():
                raise ClientDisconnect()
            use_cache = start < cached[1] and stop > cached[0]
            piece, tokens = await run_in_threadpool(
                _vectors, served, texts[start:stop], dimensions, start, use_cache=use_cache
            )
            vectors.append(piece)
            count += tokens
        return vectors, count
    finally:
        gone.cancel()


class StreamedAnswer(Response):
    """The answer of a large request, sent a piece at a time (chunked): the JSON of a piece is
    made once the client has taken the previous ones (uvicorn's ``send`` waits while the
    connection's write buffer is full), and its vectors are dropped once written. An answer its
    client does not read thus holds its vectors and one piece's JSON, never its whole JSON, and
    the connection's send timeout (connections.py) frees even that."""

    media_type = "application/json"

    def __init__(
        self,
        vectors: list[np.ndarray],
        pieces: list[tuple[int, int]],
        name: str,
        count: int,
        encoding: str,
        headers: dict[str, str],
    ) -> None:
        self.status_code, self.background = 200, None
        self.init_headers(headers)  # (no content-length: uvicorn sends it chunked)
        self._vectors, self._starts = vectors, [start for start, _ in pieces]
        self._name, self._count, self._encoding = name, count, encoding

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        head, tail = _envelope_ends(self._name, self._count)
        await send({"type": "http.response.body", "body": head, "more_body": True})
        gone = asyncio.ensure_future(_disconnected_from(receive))
        try:
            for index, start in enumerate(self._starts):
                if gone.done():  # (uvicorn drops what is sent to a closed connection)
                    return
                # an empty message: uvicorn's send returns once the client has taken enough of
                # what was sent, so no piece's JSON is made before it can be sent
                await send({"type": "http.response.body", "body": b"", "more_body": True})
                vectors, self._vectors[index] = self._vectors[index], None
                part = await run_in_threadpool(_rows, vectors, start, self._encoding, index > 0)
                del vectors
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": tail, "more_body": False})
        finally:
            gone.cancel()


def _cache_rows(served: Served, texts: list[str]) -> tuple[int, int]:
    """The rows ``(start, stop)`` of ``texts`` that go through the tokenizer's word cache."""
    tokenizer = served.model.tokenizer
    if tokenizer.word_cache is None:
        return 0, 0
    return tokenizer.cache_takes(tokenizer.normalize(texts))


async def _disconnected(request: Request) -> None:
    """Returns when the client of ``request`` (its body already read) hangs up."""
    await _disconnected_from(request.receive)


async def _disconnected_from(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _piece(
    served: Served,
    texts: list[str],
    start: int,
    dimensions: int | None,
    encoding: str,
    use_cache: bool,
) -> tuple[bytes, int]:
    vectors, count = _vectors(served, texts, dimensions, start, use_cache=use_cache)
    return _rows(vectors, start, encoding), count


def _vectors(
    served: Served,
    texts: list[str],
    dimensions: int | None,
    first_index: int = 0,
    *,
    use_cache: bool = True,
) -> tuple[np.ndarray, int]:
    """Unit vectors of ``texts`` (their first ``dimensions`` dimensions) and their piece count;
    a 400 naming the input (``first_index`` + its place) that has no piece to embed."""
    model = served.model
    tokenizer = model.tokenizer
    tokens = tokenizer.encode_normalized(tokenizer.normalize(texts), use_cache=use_cache)
    vectors = model.embed_ids(tokens.ids, tokens.offsets)
    if dimensions is not None and dimensions < model.dim:
        vectors = np.ascontiguousarray(vectors[:, :dimensions])
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    empty = np.flatnonzero(norms[:, 0] == 0)
    if len(empty):
        raise ApiError(
            400,
            f"input {first_index + int(empty[0])} has nothing to embed "
            "(no piece the vocabulary knows once normalized)",
            "input",
        )
    vectors /= norms
    return vectors, int(len(tokens.ids))


def _rows(vectors: np.ndarray, first_index: int, encoding: str, after: bool = False) -> bytes:
    """The JSON of the ``data`` items of ``vectors`` (numbered from ``first_index``), without
    the list's brackets, so that the items of several pieces are joined by commas (its first,
    when ``after`` another piece)."""
    if encoding == "base64":
        little = vectors.astype("<f4", copy=False)
        rows = [base64.b64encode(row.tobytes()).decode("ascii") for row in little]
    else:
        rows = list(vectors)  # numpy rows: orjson writes float32 itself, fast
    items = orjson.dumps(
        [
            {"object": "embedding", "index": first_index + i, "embedding": row}
            for i, row in enumerate(rows)
        ],
        option=orjson.OPT_SERIALIZE_NUMPY,
    )
    return (b"," if after else b"") + items[1:-1]


def _envelope(parts: list[bytes], name: str, count: int) -> bytes:
    """The response body: the ``data`` items (:func:`_rows` of each piece, in order), the model
    and the usage."""
    head, tail = _envelope_ends(name, count)
    return b"".join([head, b",".join(parts), tail])


def _envelope_ends(name: str, count: int) -> tuple[bytes, bytes]:
    """What comes before the ``data`` items of the response body and what comes after them."""
    usage = orjson.dumps({"prompt_tokens": count, "total_tokens": count})
    return b'{"object":"list","data":[', b"".join(
        [b'],"model":', orjson.dumps(name), b',"usage":', usage, b"}"]
    )


def _model_card(served: Served) -> dict:
    return {
        "id": served.name,
        "object": "model",
        "created": int(served.loaded_at),
        "owned_by": "psp",
        "version": served.version,
        "dimensions": served.model.dim,
    }

"""``psp serve``: the OpenAI embeddings API (``POST /v1/embeddings``, ``GET /v1/models``) over
the served models (:class:`~psp_core.serving.models.ModelSet`), on Starlette and uvicorn.

Vectors are unit length, as OpenAI's are (cosine = dot product), of the first ``dimensions``
dimensions when asked (a Matryoshka prefix, normalized after cutting). ``encoding_format``
``base64`` sends the float32 bytes little-endian, as the ``openai`` client reads them (its
default): 4 bytes a dimension where JSON floats take about 20. ``usage`` counts sentencepiece
pieces. Bad requests get a 4xx JSON error in OpenAI's shape (``{"error": {"message", "type",
"param", "code"}}``) and the server goes on; limits (inputs per request, characters per input,
body size) keep one request's memory bounded.
"""

from __future__ import annotations

import base64
import logging
import os

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from psp_core.serving.limits import Limits
from psp_core.serving.models import ModelSet, Served

log = logging.getLogger(__name__)


#: requests of at most these inputs and characters are embedded on the event loop itself
#: (quicker than the hop to a worker thread); larger ones go to a worker thread, so the loop
#: keeps reading other requests meanwhile
INLINE_INPUTS = 4
INLINE_CHARACTERS = 2_000


class ApiError(Exception):
    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def response(self) -> JSONResponse:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        body = {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        return JSONResponse({"error": body}, status_code=self.status)


def create_app(models: ModelSet, limits: Limits | None = None, lifespan=None) -> Starlette:
    limits = limits or Limits()

    async def embeddings(request: Request) -> Response:
        try:
            body = await _json_body(request, limits.max_body_bytes)
            served, texts, dimensions, encoding = _parse(body, models, limits)
            if len(texts) <= INLINE_INPUTS and sum(map(len, texts)) <= INLINE_CHARACTERS:
                # a few short inputs take less time than the hop to a worker thread
                payload = _embed(served, texts, dimensions, encoding)
            else:
                payload = await run_in_threadpool(_embed, served, texts, dimensions, encoding)
        except ApiError as error:
            return error.response()
        return Response(payload, media_type="application/json")

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
        problems = models.problems()
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
        return ApiError(500, f"internal error: {type(error).__name__}").response()

    routes = [
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/embeddings", embeddings, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{name}", one_model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ]
    return Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )


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
    return texts


def _embed(served: Served, texts: list[str], dimensions: int | None, encoding: str) -> bytes:
    """The response body: the vectors (unit length, ``dimensions`` first dimensions) and usage."""
    model = served.model
    tokens = model.tokenizer.encode(texts)
    vectors = model.embed_ids(tokens.ids, tokens.offsets)
    if dimensions is not None and dimensions < model.dim:
        vectors = np.ascontiguousarray(vectors[:, :dimensions])
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.divide(vectors, norms, out=vectors, where=norms > 0)
    if encoding == "base64":
        little = vectors.astype("<f4", copy=False)
        rows = [base64.b64encode(row.tobytes()).decode("ascii") for row in little]
    else:
        rows = list(vectors)  # numpy rows: orjson writes float32 itself, fast
    count = int(len(tokens.ids))
    return orjson.dumps(
        {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)
            ],
            "model": served.name,
            "usage": {"prompt_tokens": count, "total_tokens": count},
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
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

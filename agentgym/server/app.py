"""The env server: any registered environment over HTTP, one env instance per session.

``create_app(env_id)`` returns a FastAPI app; ``serve(env_id)`` runs it with
uvicorn (``agentgym serve ID``). The endpoints (all JSON):

==========================  ====================================================
``GET /health``             status, env id, active and maximum sessions
``GET /schema``             spec, tools, reward range, forkability, request schemas
``POST /sessions``          new session (its own env); 503 when full
``POST /sessions/{id}/…``   ``reset``, ``step``, ``fork``
``GET /sessions/{id}/…``    ``tools``, ``anchor``, ``oracle``, ``give_up``
``DELETE /sessions/{id}``   close the session's env
==========================  ====================================================

Errors are ``{"detail": "...", "error": "<ExcType>"}`` with: 404 unknown session,
400 malformed JSON, 422 invalid body (one line naming each bad field), 409 step
before reset or after the episode ended, 501 no oracle / not forkable, 503 full,
500 any other exception raised by the env. An env's exception never takes the
server down, and the session stays usable where the env allows.

Env calls block, so they run in worker threads; a per-session lock serialises
requests to one session while different sessions run concurrently. Request
bodies are validated once (``model_validate_json``) and responses are serialised
once (``model_dump_json``) inside the worker thread, which keeps the per-step
overhead to a fraction of a millisecond. Sessions idle for ``idle_timeout``
seconds are closed by a background task started in the app's lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

import agentgym
from agentgym.core import AgentEnv
from agentgym.server.protocol import (
    ActionResponse,
    AnchorResponse,
    CreateSessionRequest,
    HealthResponse,
    ResetRequest,
    ResetResponse,
    SchemaResponse,
    SpecInfo,
    StepRequest,
    StepResponse,
    ToolsResponse,
    encode_info,
)
from agentgym.server.sessions import ApiError, SessionStore, describe_validation_error, ok, respond

__all__ = ["ApiError", "create_app", "serve", "uvicorn_config"]

_M = TypeVar("_M", bound=BaseModel)


async def _parse(request: Request, model: type[_M]) -> _M:
    """Validate the request body as ``model`` in one pass (an empty body means ``{}``)."""
    body = await request.body()
    try:
        return model.model_validate_json(body or b"{}")
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if any(e.get("type") == "json_invalid" for e in errors):
            raise ApiError(400, f"malformed JSON body: {errors[0].get('msg', '')}") from None
        raise ApiError(422, describe_validation_error(errors)) from None


def _schema(env_id: str, env_kwargs: dict[str, Any]) -> bytes:
    """Describe the env, building (and closing) one instance to read its tools."""
    found = agentgym.spec(env_id)
    env = agentgym.make(env_id, **env_kwargs)
    try:
        doc = (type(env).__doc__ or "").strip().splitlines()
        schema = SchemaResponse(
            env_id=env_id,
            spec=SpecInfo(
                max_turns=env.max_turns,
                description=found.description or (doc[0] if doc else ""),
                nondeterministic=found.nondeterministic,
            ),
            tools=env.tools,
            reward_range=tuple(env.reward_range),
            forkable=bool(env.forkable),
            requests={m.__name__: m.model_json_schema() for m in (CreateSessionRequest, ResetRequest, StepRequest)},
        )
    finally:
        env.close()
    return ok(schema)


# ------------------------------------------------------------------ env calls
# Each runs in a worker thread and returns the response body, so the event loop
# only moves bytes.
def _reset(env: AgentEnv, seed: int | None, options: dict[str, Any] | None) -> bytes:
    observation, info = env.reset(seed=seed, options=options)
    bounds = tuple(float(b) for b in env.return_bounds())
    return ok(ResetResponse(observation=observation, info=encode_info(info), return_bounds=bounds))


def _step(env: AgentEnv, action: Any) -> bytes:
    observation, reward, terminated, truncated, info = env.step(action)
    return ok(
        StepResponse(
            observation=observation,
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            info=encode_info(info),
        )
    )


def _oracle(env: AgentEnv) -> bytes:
    env.require_task()
    return ok(ActionResponse(action=env.oracle_action()))


def _service_routes(app: FastAPI, store: SessionStore, schema: bytes) -> None:
    """Attach the endpoints that are not about one session's env: health, schema, create, delete."""

    @app.get("/health")
    async def health() -> Response:
        return respond(
            ok(HealthResponse(env_id=store.env_id, sessions=len(store.sessions), max_sessions=store.max_sessions))
        )

    @app.get("/schema")
    async def get_schema() -> Response:
        return respond(schema)

    @app.post("/sessions")
    async def create_session(request: Request) -> Response:
        session = await store.create(await _parse(request, CreateSessionRequest))
        return respond(session.describe(store.env_id))

    @app.delete("/sessions/{session_id}")
    async def delete(session_id: str) -> Response:
        await store.close(store.get(session_id))
        return respond(json.dumps({"session_id": session_id, "closed": True}).encode())


def _session_routes(app: FastAPI, store: SessionStore) -> None:
    """Attach the endpoints that call one session's env."""

    @app.post("/sessions/{session_id}/reset")
    async def reset(session_id: str, request: Request) -> Response:
        session = store.get(session_id)
        req = await _parse(request, ResetRequest)
        options = {**session.options, **(req.options or {})} if session.options or req.options else None
        return respond(await store.call(session, _reset, session.env, req.seed, options))

    @app.post("/sessions/{session_id}/step")
    async def step(session_id: str, request: Request) -> Response:
        session = store.get(session_id)
        req = await _parse(request, StepRequest)
        return respond(await store.call(session, _step, session.env, req.action))

    @app.get("/sessions/{session_id}/tools")
    async def tools(session_id: str) -> Response:
        session = store.get(session_id)
        specs = await store.call(session, lambda: session.env.tools)
        return respond(ok(ToolsResponse(tools=specs)))

    @app.get("/sessions/{session_id}/anchor")
    async def anchor(session_id: str) -> Response:
        session = store.get(session_id)
        return respond(ok(AnchorResponse(anchor=await store.call(session, session.env.anchor))))

    @app.get("/sessions/{session_id}/oracle")
    async def oracle(session_id: str) -> Response:
        session = store.get(session_id)
        return respond(await store.call(session, _oracle, session.env))

    @app.get("/sessions/{session_id}/give_up")
    async def give_up(session_id: str) -> Response:
        session = store.get(session_id)
        return respond(ok(ActionResponse(action=await store.call(session, session.env.give_up_action))))

    @app.post("/sessions/{session_id}/fork")
    async def fork(session_id: str) -> Response:
        child = await store.fork(store.get(session_id))
        return respond(child.describe(store.env_id))


def create_app(
    env_id: str, *, max_sessions: int = 256, idle_timeout: float = 600.0, env_kwargs: dict[str, Any] | None = None
) -> FastAPI:
    """Build the HTTP app that serves ``env_id``.

    Args:
        env_id: A registered env id; one instance is built now to describe it.
        max_sessions: Most sessions alive at once; more get 503.
        idle_timeout: Close a session after this many seconds without a request.
        env_kwargs: Constructor kwargs for every session (a session's own kwargs win).

    Returns:
        The FastAPI app (run it with uvicorn, or see :func:`serve`).

    Raises:
        EnvNotFoundError: When ``env_id`` is not registered.
        ValueError: For a non-positive ``max_sessions`` or ``idle_timeout``.
    """
    if max_sessions < 1 or idle_timeout <= 0:
        raise ValueError(f"max_sessions must be >= 1 and idle_timeout > 0, got {max_sessions} and {idle_timeout}")
    store = SessionStore(env_id, max_sessions, idle_timeout, dict(env_kwargs or {}))
    schema = _schema(env_id, store.env_kwargs)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        reaper = asyncio.create_task(store.reap_forever())
        try:
            yield
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await store.close_all()

    app = FastAPI(title=f"AgentGym env server: {env_id}", lifespan=lifespan)
    app.state.store = store

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> Response:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> Response:
        return ApiError(422, describe_validation_error(list(exc.errors()))).response()

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> Response:
        return ApiError(500, f"{type(exc).__name__}: {exc}", type(exc).__name__).response()

    _service_routes(app, store, schema)
    _session_routes(app, store)
    return app


def uvicorn_config(app: FastAPI, host: str, port: int, log_level: str) -> uvicorn.Config:
    """A uvicorn config using uvloop and httptools where installed, without access logs."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        loop="uvloop" if importlib.util.find_spec("uvloop") else "auto",
        http="httptools" if importlib.util.find_spec("httptools") else "auto",
        lifespan="on",
    )


def serve(
    env_id: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_sessions: int = 256,
    idle_timeout: float = 600.0,
    log_level: str = "warning",
    env_kwargs: dict[str, Any] | None = None,
) -> None:
    """Serve ``env_id`` over HTTP until interrupted (what ``agentgym serve`` runs).

    Args:
        env_id: A registered env id.
        host: Interface to listen on (``0.0.0.0`` for all).
        port: TCP port.
        max_sessions: Most sessions alive at once.
        idle_timeout: Seconds after which an unused session is closed.
        log_level: uvicorn's log level.
        env_kwargs: Constructor kwargs for every session.
    """
    app = create_app(env_id, max_sessions=max_sessions, idle_timeout=idle_timeout, env_kwargs=env_kwargs)
    uvicorn.Server(uvicorn_config(app, host, port, log_level)).run()

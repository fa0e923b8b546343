"""Env-server sessions: one env instance per client session, its lock, and the error answers.

:class:`SessionStore` owns the live sessions of one app and the worker threads their envs run
in; :class:`ApiError` is the JSON error answer every endpoint raises (see :mod:`.app` for the
status codes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi.responses import Response
from gymnasium.utils import seeding
from pydantic import BaseModel

import agentgym
from agentgym.core import AgentEnv
from agentgym.errors import EpisodeEndedError, InvalidOptionsError, ResetNeededError
from agentgym.server.protocol import CreateSessionRequest, ErrorResponse, SessionResponse

__all__ = ["ApiError", "Session", "SessionStore", "describe_validation_error", "env_error", "ok", "respond"]

_JSON = "application/json"
_log = logging.getLogger(__name__)
_T = TypeVar("_T")

class ApiError(Exception):
    """An error answer: HTTP status, one-line detail and the exception type behind it."""

    def __init__(self, status: int, detail: str, error: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.error = error

    def response(self) -> Response:
        """Render as a JSON :class:`ErrorResponse`."""
        body = ErrorResponse(detail=self.detail, error=self.error).model_dump_json(exclude_none=True)
        return Response(body, status_code=self.status, media_type=_JSON)


def env_error(exc: Exception) -> ApiError:
    """Map an exception raised by env code to its HTTP status."""
    name = type(exc).__name__
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ResetNeededError | EpisodeEndedError):
        return ApiError(409, str(exc), name)
    if isinstance(exc, InvalidOptionsError):
        return ApiError(422, str(exc), name)
    if isinstance(exc, NotImplementedError):
        return ApiError(501, str(exc) or "not implemented by this env", name)
    _log.warning("the env raised %s", name, exc_info=exc)  # only on failures: no per-request logging
    return ApiError(500, f"{name}: {exc}", name)


def describe_validation_error(errors: list[Any]) -> str:
    """Format pydantic / FastAPI validation errors as ``"a.b: problem; c: problem"``."""
    parts = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        parts.append(f"{'.'.join(loc) or 'body'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def ok(model: BaseModel) -> bytes:
    """Serialise a response model to JSON bytes."""
    return model.model_dump_json().encode()


def respond(body: bytes) -> Response:
    """A 200 JSON response holding ``body``."""
    return Response(body, media_type=_JSON)


@dataclass(eq=False)
class Session:
    """One client's env instance and its bookkeeping."""

    id: str
    env: AgentEnv
    options: dict[str, Any]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_used: float = field(default_factory=time.monotonic)
    closed: bool = False

    def describe(self, env_id: str) -> bytes:
        """The :class:`SessionResponse` for this session, as JSON bytes."""
        env, task = self.env, self.env.task
        return ok(
            SessionResponse(
                session_id=self.id,
                env_id=env_id,
                max_turns=env.max_turns,
                turn=env.turn,
                started=task is not None,
                done=env.done,
                task=task,
            )
        )


class SessionStore:
    """The live sessions of one app, and the worker threads their envs run in."""

    def __init__(self, env_id: str, max_sessions: int, idle_timeout: float, env_kwargs: dict[str, Any]) -> None:
        self.env_id = env_id
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self.env_kwargs = env_kwargs
        self.sessions: dict[str, Session] = {}
        self._pending = 0
        self._executor: ThreadPoolExecutor | None = None

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The worker threads env calls run in (a plain executor: anyio's to_thread costs more per call)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max(16, min(self.max_sessions, 256)), thread_name_prefix="agentgym-env")
        return self._executor

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run a blocking call in a worker thread.

        If the awaiting request is cancelled, this still waits for the call to
        finish before re-raising, so a session's lock is never released while its
        env is in use.
        """
        future = asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            while not future.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait([future])
            raise

    def get(self, session_id: str) -> Session:
        """Return a live session.

        Raises:
            ApiError: 404 when there is no such session (never created, closed or reaped).
        """
        session = self.sessions.get(session_id)
        if session is None:
            raise ApiError(404, f"no session {session_id!r} (closed, reaped after idling, or never created)")
        return session

    @contextlib.contextmanager
    def _slot(self) -> Any:
        if len(self.sessions) + self._pending >= self.max_sessions:
            raise ApiError(
                503,
                f"the server is at its limit of {self.max_sessions} sessions; close unused sessions "
                "(DELETE /sessions/{id}) or start the server with a larger max_sessions",
            )
        self._pending += 1
        try:
            yield
        finally:
            self._pending -= 1

    def _add(self, env: AgentEnv, options: dict[str, Any]) -> Session:
        session = Session(secrets.token_hex(8), env, options)
        self.sessions[session.id] = session
        return session

    def _build(self, req: CreateSessionRequest) -> AgentEnv:
        kwargs = {**self.env_kwargs, **(req.kwargs or {})}
        if req.max_turns is not None:
            kwargs["max_turns"] = req.max_turns
        try:
            env = agentgym.make(self.env_id, **kwargs)
        except (TypeError, ValueError, KeyError) as exc:
            raise ApiError(
                422, f"cannot build {self.env_id} with kwargs {kwargs}: {type(exc).__name__}: {exc}", type(exc).__name__
            ) from exc
        if req.seed is not None:
            env.np_random = seeding.np_random(req.seed)[0]
        return env

    async def create(self, req: CreateSessionRequest) -> Session:
        """Build a new env and register it as a session."""
        with self._slot():
            try:
                env = await self.run(self._build, req)
            except Exception as exc:  # reported as an error answer
                raise env_error(exc) from exc
            return self._add(env, dict(req.options or {}))

    async def call(self, session: Session, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(*args)`` in a worker thread holding the session's lock.

        Raises:
            ApiError: 404 when the session closed meanwhile, or the env's error mapped to a status.
        """
        async with session.lock:
            if session.closed:
                raise ApiError(404, f"session {session.id!r} was closed")
            session.last_used = time.monotonic()
            try:
                return await self.run(fn, *args)
            except Exception as exc:  # reported as an error answer
                raise env_error(exc) from exc
            finally:
                session.last_used = time.monotonic()

    async def fork(self, parent: Session) -> Session:
        """Register a new session holding ``parent.env.fork()``."""
        with self._slot():
            env = await self.call(parent, parent.env.fork)
            return self._add(env, dict(parent.options))

    async def close(self, session: Session) -> None:
        """Remove a session and close its env (errors while closing are ignored)."""
        self.sessions.pop(session.id, None)
        async with session.lock:
            if session.closed:
                return
            session.closed = True
            with contextlib.suppress(Exception):
                await self.run(session.env.close)

    async def reap_idle(self) -> int:
        """Close every session unused for ``idle_timeout`` seconds; return how many."""
        now = time.monotonic()
        idle = [s for s in self.sessions.values() if not s.lock.locked() and now - s.last_used > self.idle_timeout]
        for session in idle:
            await self.close(session)
        return len(idle)

    async def reap_forever(self) -> None:
        """Call :meth:`reap_idle` periodically until cancelled."""
        interval = min(max(self.idle_timeout / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(Exception):
                await self.reap_idle()

    async def close_all(self) -> None:
        """Close every session and stop the worker threads (at shutdown)."""
        for session in list(self.sessions.values()):
            await self.close(session)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

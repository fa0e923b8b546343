"""The generation queue: one backend call for all the episodes waiting for the model.

Episodes ``await queue.generate(prompt, params, key)``. A single flusher task
sends the pending requests to the backend as one batch when

* every active episode is waiting (nothing more can arrive), or
* ``max_batch_size`` requests are pending, or
* no new request has arrived for ``max_wait_s`` (so one slow env step does not
  hold up everyone else, while episodes that trickle in one after another, as
  they do after a shared env latency, still share a batch; ``None`` disables
  this trigger, which makes batch composition, and hence every float,
  independent of timing).

Requests are ordered by their ``key`` inside a batch, so a batch's layout does
not depend on arrival order. The backend runs in a dedicated thread, so the
event loop keeps dispatching env steps while the model generates. Only one
backend call runs at a time.

Backends that set ``per_prompt_sampling = True`` receive one
:class:`SamplingParams` per prompt (per-episode seeds). Others are called once
per distinct set of parameters, with the seeds of that group folded into one.

**Continuous batching** (``continuous=True``, for backends with a ``serve``
method, see :class:`~agentgym.backends.base.ContinuousBackend`): once a batch
is ready by the rules above, the backend keeps one decode batch running. Between
two decode steps it takes the pending requests (up to ``max_batch_size`` rows
in the batch) once they fill the batch, or every active episode is decoding or
pending, or the oldest has waited ``max_wait_s``; a row that finishes is
answered at once, so its episode steps its env while the other rows keep
decoding, and rejoins when it asks again. When
the batch runs empty the rules above decide again when to start. Batch
composition then depends on timing, so runs are reproducible only up to float
rounding; the engine uses it only when ``max_wait_s`` is not None.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from agentgym.backends.base import Generation, InflightRequest, SamplingParams, TokenBackend

__all__ = ["GenerationQueue", "call_backend"]


@dataclass
class _Request:
    prompt: list[int]
    params: SamplingParams
    key: tuple[Any, ...]
    future: asyncio.Future[Generation]
    arrived: float


def call_backend(backend: TokenBackend, prompts: list[list[int]], params: list[SamplingParams]) -> list[Generation]:
    """Generate for prompts that each carry their own :class:`SamplingParams`.

    Args:
        backend: Any token backend.
        prompts: The prompts.
        params: One sampling spec per prompt.

    Returns:
        One generation per prompt, in order.
    """
    if getattr(backend, "per_prompt_sampling", False):
        return list(backend.generate(prompts, params))  # type: ignore[arg-type]
    groups: dict[SamplingParams, list[int]] = {}
    for i, p in enumerate(params):
        groups.setdefault(replace(p, seed=None), []).append(i)
    out: list[Generation | None] = [None] * len(prompts)
    for shared, rows in groups.items():
        seeds = [params[i].seed for i in rows if params[i].seed is not None]
        seed = hash(tuple(seeds)) & 0x7FFFFFFF if seeds else None
        generations = backend.generate([prompts[i] for i in rows], replace(shared, seed=seed))
        for i, generation in zip(rows, generations, strict=True):
            out[i] = generation
    return [g for g in out if g is not None]


class GenerationQueue:
    """Batches generation requests across episodes (see the module docstring).

    Args:
        backend: The token backend.
        max_batch_size: Most requests per backend call.
        max_wait_s: Flush once no request has arrived for this long (None: never by time).
        on_batch: Called with ``(batch size, generated tokens, seconds)`` after each call
            (continuous batching: once per group of joining rows, with the
            tokens and seconds of the whole serving session on its last call).
        continuous: Use the backend's continuous batching (it must have ``serve``).
    """

    def __init__(
        self,
        backend: TokenBackend,
        *,
        max_batch_size: int = 64,
        max_wait_s: float | None = 0.02,
        on_batch: Callable[[int, int, float], None] | None = None,
        continuous: bool = False,
    ) -> None:
        if continuous and not callable(getattr(backend, "serve", None)):
            raise ValueError(f"{type(backend).__name__} has no continuous batching (serve)")
        self.backend = backend
        self.continuous = continuous
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.on_batch = on_batch
        self.active = 0
        self._pending: list[_Request] = []
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentgym-generate")
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None
        self._lock = threading.RLock()  # the backend thread takes pending requests while serving

    # -------------------------------------------------------------- episodes
    def episode_started(self) -> None:
        """Count one more episode that may submit requests."""
        self.active += 1

    def episode_finished(self) -> None:
        """Count one episode fewer (it may now be the only thing others wait for)."""
        self.active -= 1
        self._wakeup.set()

    async def generate(self, prompt: list[int], params: SamplingParams, key: tuple[Any, ...]) -> Generation:
        """Queue one request and wait for its generation.

        Args:
            prompt: The token context.
            params: Sampling spec (seed included).
            key: Orders requests inside a batch (e.g. the episode's index).
        """
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._pending.append(_Request(prompt, params, key, future, time.perf_counter()))
        self._wakeup.set()
        return await future

    # --------------------------------------------------------------- flushing
    def _ready(self) -> bool:
        with self._lock:
            if not self._pending:
                return False
            if len(self._pending) >= self.max_batch_size or len(self._pending) >= self.active:
                return True
            if self.max_wait_s is None:
                return False
            return time.perf_counter() - max(r.arrived for r in self._pending) >= self.max_wait_s

    def _join_ready(self, room: int, decoding: int) -> bool:
        """Whether pending requests should join a running batch now (continuous batching).

        They join together, not one by one (each join is a prefill and a cache
        merge): when they fill the batch, when every active episode is decoding
        or pending (nobody else can come), or when the oldest has waited
        ``max_wait_s``.
        """
        with self._lock:
            if not self._pending:
                return False
            if len(self._pending) >= room or len(self._pending) + decoding >= self.active:
                return True
            oldest = min(r.arrived for r in self._pending)
            return self.max_wait_s is None or time.perf_counter() - oldest >= self.max_wait_s

    def _arm_timer(self) -> None:
        with self._lock:
            if self.max_wait_s is None or not self._pending or self._timer is not None:
                return
            delay = max(r.arrived for r in self._pending) + self.max_wait_s - time.perf_counter()

        def fire() -> None:
            self._timer = None
            self._wakeup.set()

        self._timer = asyncio.get_running_loop().call_later(max(delay, 0.0), fire)

    async def run(self) -> None:
        """The flusher loop; run it as a task and call :meth:`close` to stop it."""
        loop = asyncio.get_running_loop()
        while not self._closed:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self.continuous:
                if self._ready():
                    await self._serve(loop)
                self._arm_timer()
                continue
            while self._ready():
                self._pending.sort(key=lambda r: r.key)
                batch, self._pending = self._pending[: self.max_batch_size], self._pending[self.max_batch_size :]
                prompts, params = [r.prompt for r in batch], [r.params for r in batch]
                start = time.perf_counter()
                try:
                    outputs = await loop.run_in_executor(self._executor, call_backend, self.backend, prompts, params)
                except Exception as exc:
                    for request in batch:
                        if not request.future.done():
                            request.future.set_exception(exc)
                    continue
                if self.on_batch is not None:
                    tokens = sum(len(g.token_ids) for g in outputs)
                    self.on_batch(len(batch), tokens, time.perf_counter() - start)
                for request, generation in zip(batch, outputs, strict=True):
                    if not request.future.done():
                        request.future.set_result(generation)
            self._arm_timer()

    async def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        """One continuous-batching session of the backend (see the module docstring)."""
        inflight: dict[int, _Request] = {}
        joins: list[int] = []
        tokens = [0]

        def answer(request: _Request, generation: Generation) -> None:
            if not request.future.done():
                request.future.set_result(generation)

        def deliver(request: _Request, generation: Generation) -> None:  # backend thread
            inflight.pop(id(request), None)
            tokens[0] += len(generation.token_ids)
            try:
                loop.call_soon_threadsafe(answer, request, generation)
            except RuntimeError:  # the loop is gone (run cancelled)
                pass

        def poll(room: int, idle: bool) -> list[InflightRequest]:  # backend thread
            with self._lock:
                if self._closed or not (self._ready() if idle else self._join_ready(room, len(inflight))):
                    return []
                self._pending.sort(key=lambda r: r.key)
                taken, self._pending = self._pending[:room], self._pending[room:]
            for request in taken:
                inflight[id(request)] = request
            if taken:
                joins.append(len(taken))
            return [(r.prompt, r.params, lambda g, r=r: deliver(r, g)) for r in taken]

        start = time.perf_counter()
        try:
            await loop.run_in_executor(self._executor, self.backend.serve, poll)  # type: ignore[attr-defined]
        except Exception as exc:
            for request in list(inflight.values()):
                if not request.future.done():
                    request.future.set_exception(exc)
        if self.on_batch is not None:
            for i, rows in enumerate(joins):
                last = i == len(joins) - 1
                self.on_batch(rows, tokens[0] if last else 0, time.perf_counter() - start if last else 0.0)

    def close(self) -> None:
        """Stop the flusher and the generation thread."""
        self._closed = True
        self._wakeup.set()
        if self._timer is not None:
            self._timer.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

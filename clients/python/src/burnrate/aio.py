"""asyncio variant: the synchronous client's calls, run in a worker thread."""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, Type, TypeVar, Union

from . import usage as _usage
from ._buffer import Buffer
from ._periods import Period, PeriodBudget
from .client import Burnrate, FailMode, Guard, OnAlert, OnError, _hold_body, _with_run

if TYPE_CHECKING:  # typing_extensions for Python 3.9, read by type checkers only (no runtime dependency)
    from typing_extensions import Concatenate, ParamSpec

    P = ParamSpec("P")
R = TypeVar("R")


class _DeferredBurnrate(Burnrate):
    _CONFIGURE_ON_INIT = False
    _LOOP_FLUSHER = True


class AsyncBurnrate:
    """Same arguments and behaviour as ``Burnrate``, with awaitable calls.

    The constructor does no I/O; the config (when a threshold or webhook is given) is
    sent by ``await client.configure()`` if you call it, else before the first event.

    With ``buffer``, a buffered call queues its event and returns at once (no thread hop);
    a task on the running loop sends the batches. ``await client.close()`` (or ``async with``)
    flushes what is left.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        agent_id: str,
        cost_threshold_usd: Optional[float] = None,
        slack_webhook_url: Optional[str] = None,
        alert_at: Optional[Sequence[float]] = None,
        period_budgets: Optional[Sequence[PeriodBudget]] = None,
        run_budget_usd: Optional[float] = None,
        timeout: float = 10.0,
        max_retries: int = 3,
        fail_mode: FailMode = "open",
        on_error: Optional[OnError] = None,
        on_alert: Optional[OnAlert] = None,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 30.0,
        buffer: Union[bool, Buffer, None] = None,
    ) -> None:
        self._client = _DeferredBurnrate(
            base_url=base_url,
            api_key=api_key,
            agent_id=agent_id,
            cost_threshold_usd=cost_threshold_usd,
            slack_webhook_url=slack_webhook_url,
            alert_at=alert_at,
            period_budgets=period_budgets,
            run_budget_usd=run_budget_usd,
            timeout=timeout,
            max_retries=max_retries,
            fail_mode=fail_mode,
            on_error=on_error,
            on_alert=on_alert,
            retry_base_delay=retry_base_delay,
            retry_max_delay=retry_max_delay,
            buffer=buffer,
        )

    @property
    def sync(self) -> Burnrate:
        """The underlying thread-safe client (for code that is not async)."""
        return self._client

    @property
    def agent_id(self) -> str:
        return self._client.agent_id

    @property
    def paused(self) -> bool:
        return self._client.paused

    @property
    def paused_reason(self) -> Optional[str]:
        return self._client.paused_reason

    @property
    def paused_period(self) -> Optional[str]:
        return self._client.paused_period

    @property
    def ignoring_pause(self) -> bool:
        return self._client.ignoring_pause

    @property
    def last_response(self) -> Optional[Dict[str, Any]]:
        return self._client.last_response

    @property
    def remaining_usd(self) -> Optional[float]:
        return self._client.remaining_usd

    @property
    def projected_exhaustion_at(self) -> Optional[datetime]:
        return self._client.projected_exhaustion_at

    @property
    def periods(self) -> Optional[List[Period]]:
        return self._client.periods

    @property
    def run_id(self) -> Optional[str]:
        return self._client.run_id

    @property
    def run_stopped(self) -> bool:
        return self._client.run_stopped

    @property
    def run_stopped_reason(self) -> Optional[str]:
        return self._client.run_stopped_reason

    @property
    def buffer(self) -> Optional[Buffer]:
        return self._client.buffer

    @property
    def pending_events(self) -> int:
        return self._client.pending_events

    def __repr__(self) -> str:
        return "Async" + repr(self._client)

    async def configure(self) -> bool:
        """Send the config now; True if it is in place (or there is none)."""
        return await asyncio.to_thread(self._client._ensure_config)

    async def send(self, event: Mapping[str, Any], *, buffered: Optional[bool] = None) -> bool:
        """Burnrate.send; a buffered event is queued here, in the loop's thread, without I/O."""
        return await self._submit(self._client._in_run(event), buffered)

    async def _submit(self, event: Mapping[str, Any], buffered: Optional[bool]) -> bool:
        """send() of an event that has its run already (given in the loop's thread, in call order)."""
        queued = self._client._buffer(event, buffered)
        if queued is not None:
            return queued
        if self._client._held_back(event):  # answer without a thread hop once stopped
            return False
        return await asyncio.to_thread(self._client._submit, event, False)

    async def llm_call(
        self,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        *,
        buffered: bool = False,
        **extra: Any,
    ) -> bool:
        return await self.send(
            _usage.llm_call_event(model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, **extra),
            buffered=buffered,
        )

    async def tool_call(
        self,
        tool_name: str,
        metadata: Optional[Mapping[str, Any]] = None,
        *,
        buffered: Optional[bool] = None,
        run_id: Optional[str] = None,
    ) -> bool:
        return await self.send(_with_run(_usage.tool_call_event(tool_name, metadata), run_id), buffered=buffered)

    async def start(
        self, metadata: Optional[Mapping[str, Any]] = None, *, buffered: Optional[bool] = None, run_id: Optional[str] = None
    ) -> bool:
        """Burnrate.start: begins a run (``run_id``, else a new UUID)."""
        return await self.send(_with_run(_usage.start_event(metadata), run_id), buffered=buffered)

    async def end(self, metadata: Optional[Mapping[str, Any]] = None, *, buffered: Optional[bool] = None) -> bool:
        """Burnrate.end: the current run's last event; with the buffer on, agent_end is queued
        and the buffer flushed."""
        client, batcher = self._client, self._client._batcher
        event = client._in_run(_usage.end_event(metadata))
        if batcher is None or batcher.closed:
            return await self._submit(event, False)
        if buffered is False:
            await self.flush()
            return await self._submit(event, False)
        queued = client._buffer(event, True)
        if queued is None:  # closed meanwhile
            return await self._submit(event, False)
        delivered = await self.flush()
        if client.paused:
            return False
        return queued and client._go_on(delivered)

    async def from_openai_chat(self, model: str, usage: Any, *, buffered: bool = False, **extra: Any) -> bool:
        return await self.send(_usage.from_openai_chat(model, usage, **extra), buffered=buffered)

    async def from_openai_responses(self, model: str, usage: Any, *, buffered: bool = False, **extra: Any) -> bool:
        return await self.send(_usage.from_openai_responses(model, usage, **extra), buffered=buffered)

    async def from_usage(
        self, provider: str, model: str, usage: Any, api_flavor: Optional[str] = None, *, buffered: bool = False, **extra: Any
    ) -> bool:
        return await self.send(_usage.from_usage(provider, model, usage, api_flavor, **extra), buffered=buffered)

    async def from_anthropic(self, model: str, usage: Any, *, buffered: bool = False, **extra: Any) -> bool:
        return await self.send(_usage.from_anthropic(model, usage, **extra), buffered=buffered)

    async def flush(self, timeout: Optional[float] = None) -> bool:
        """Burnrate.flush, awaitable (the requests run in asyncio.to_thread)."""
        if self._client.pending_events == 0:
            return True
        return await asyncio.to_thread(self._client.flush, timeout)

    async def close(self, timeout: Optional[float] = None) -> bool:
        """Burnrate.close, awaitable: flush what is left and turn the buffer off."""
        if self._client._batcher is None:
            return True
        return await asyncio.to_thread(self._client.close, timeout)

    async def __aenter__(self) -> AsyncBurnrate:
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.close()

    def guard(
        self, *, model: str, input_tokens: int, max_output_tokens: int, ttl_seconds: Optional[int] = None
    ) -> AsyncGuard:
        """``async with client.guard(...) as guard``: Burnrate.guard, awaitable. The body must
        check ``guard.allowed``: an ``async with`` cannot skip its body."""
        return AsyncGuard(Guard(self._client, _hold_body(self.agent_id, model, input_tokens, max_output_tokens, ttl_seconds)))

    def guarded(
        self, *, model: str, input_tokens: int, max_output_tokens: int, ttl_seconds: Optional[int] = None
    ) -> Callable[[Callable[Concatenate[AsyncGuard, P], Awaitable[R]]], Callable[P, Awaitable[Optional[R]]]]:
        """Burnrate.guarded for coroutine functions: each call awaits the function under its own
        guard, which it receives first. Refused, the function is not called and the call
        returns None."""
        body = _hold_body(self.agent_id, model, input_tokens, max_output_tokens, ttl_seconds)

        def decorate(fn: Callable[Concatenate[AsyncGuard, P], Awaitable[R]]) -> Callable[P, Awaitable[Optional[R]]]:
            if not inspect.iscoroutinefunction(fn):
                # Its call would run (and make the LLM call) before the guard could hold it back.
                raise TypeError("AsyncBurnrate.guarded decorates a coroutine function (async def), got %r" % (fn,))

            @functools.wraps(fn)
            async def call(*args: P.args, **kwargs: P.kwargs) -> Optional[R]:
                async with AsyncGuard(Guard(self._client, body)) as guard:
                    if not guard.allowed:
                        return None
                    return await fn(guard, *args, **kwargs)

            return call

        return decorate

    async def refresh(self) -> bool:
        return await asyncio.to_thread(self._client.refresh)

    async def wait_until_resumed(self, poll_interval: float = 5.0, timeout: Optional[float] = None) -> bool:
        """Like Burnrate.wait_until_resumed, sleeping with asyncio.sleep between polls."""
        if not (poll_interval > 0):
            raise ValueError("poll_interval must be > 0, got %r" % (poll_interval,))
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if not await self.refresh():
                return True
            delay = poll_interval
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                delay = min(poll_interval, remaining)
            await asyncio.sleep(delay)


class AsyncGuard:
    """``Guard`` for ``AsyncBurnrate``: the same attributes, entered with ``async with`` and
    with awaitable report methods (the guard's requests run in ``asyncio.to_thread``)."""

    def __init__(self, guard: Guard) -> None:
        self._guard = guard

    @property
    def sync(self) -> Guard:
        """The underlying guard (its report methods block: for code that is not async)."""
        return self._guard

    @property
    def model(self) -> str:
        return self._guard.model

    @property
    def allowed(self) -> bool:
        return self._guard.allowed

    @property
    def reason(self) -> Optional[str]:
        return self._guard.reason

    @property
    def hold_id(self) -> Optional[str]:
        return self._guard.hold_id

    @property
    def held_usd(self) -> float:
        return self._guard.held_usd

    @property
    def worst_case_usd(self) -> Optional[float]:
        return self._guard.worst_case_usd

    @property
    def remaining_usd(self) -> Optional[float]:
        return self._guard.remaining_usd

    @property
    def paused_reason(self) -> Optional[str]:
        return self._guard.paused_reason

    @property
    def paused_period(self) -> Optional[str]:
        return self._guard.paused_period

    @property
    def expires_at(self) -> Optional[datetime]:
        return self._guard.expires_at

    @property
    def reported(self) -> bool:
        return self._guard.reported

    def __repr__(self) -> str:
        return "Async" + repr(self._guard)

    async def __aenter__(self) -> AsyncGuard:
        client = self._guard._client
        if client.paused or client.run_stopped:  # refused without a request: no thread hop
            self._guard.__enter__()
        else:
            await asyncio.to_thread(self._guard.__enter__)
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await asyncio.to_thread(self._guard.__exit__, exc_type, exc, tb)

    async def llm_call(
        self, input_tokens: int, output_tokens: int, cache_read_tokens: int = 0, cache_write_tokens: int = 0, **extra: Any
    ) -> bool:
        return await asyncio.to_thread(
            self._guard.llm_call, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, **extra
        )

    async def from_openai_chat(self, model: str, usage: Any, **extra: Any) -> bool:
        return await asyncio.to_thread(self._guard.from_openai_chat, model, usage, **extra)

    async def from_openai_responses(self, model: str, usage: Any, **extra: Any) -> bool:
        return await asyncio.to_thread(self._guard.from_openai_responses, model, usage, **extra)

    async def from_anthropic(self, model: str, usage: Any, **extra: Any) -> bool:
        return await asyncio.to_thread(self._guard.from_anthropic, model, usage, **extra)

    async def from_usage(self, provider: str, model: str, usage: Any, api_flavor: Optional[str] = None, **extra: Any) -> bool:
        return await asyncio.to_thread(self._guard.from_usage, provider, model, usage, api_flavor, **extra)

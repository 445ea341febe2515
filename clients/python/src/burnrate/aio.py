"""asyncio variant: the synchronous client's calls, run in a worker thread."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any, Dict, Mapping, Optional, Sequence

from .client import Burnrate, FailMode, OnAlert, OnError


class _DeferredBurnrate(Burnrate):
    _CONFIGURE_ON_INIT = False


class AsyncBurnrate:
    """Same arguments and behaviour as ``Burnrate``, with awaitable calls.

    The constructor does no I/O; the config (when a threshold or webhook is given) is
    sent by ``await client.configure()`` if you call it, else before the first event.
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
        timeout: float = 10.0,
        max_retries: int = 3,
        fail_mode: FailMode = "open",
        on_error: Optional[OnError] = None,
        on_alert: Optional[OnAlert] = None,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 30.0,
    ) -> None:
        self._client = _DeferredBurnrate(
            base_url=base_url,
            api_key=api_key,
            agent_id=agent_id,
            cost_threshold_usd=cost_threshold_usd,
            slack_webhook_url=slack_webhook_url,
            alert_at=alert_at,
            timeout=timeout,
            max_retries=max_retries,
            fail_mode=fail_mode,
            on_error=on_error,
            on_alert=on_alert,
            retry_base_delay=retry_base_delay,
            retry_max_delay=retry_max_delay,
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

    def __repr__(self) -> str:
        return "Async" + repr(self._client)

    async def configure(self) -> bool:
        """Send the config now; True if it is in place (or there is none)."""
        return await asyncio.to_thread(self._client._ensure_config)

    async def send(self, event: Mapping[str, Any]) -> bool:
        if self._client.paused:  # answer without a thread hop once stopped
            return False
        return await asyncio.to_thread(self._client.send, event)

    async def llm_call(
        self,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        **extra: Any,
    ) -> bool:
        return await asyncio.to_thread(
            self._client.llm_call, model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, **extra
        )

    async def tool_call(self, tool_name: str, metadata: Optional[Mapping[str, Any]] = None) -> bool:
        return await asyncio.to_thread(self._client.tool_call, tool_name, metadata)

    async def start(self, metadata: Optional[Mapping[str, Any]] = None) -> bool:
        return await asyncio.to_thread(self._client.start, metadata)

    async def end(self, metadata: Optional[Mapping[str, Any]] = None) -> bool:
        return await asyncio.to_thread(self._client.end, metadata)

    async def from_openai_chat(self, model: str, usage: Any, **extra: Any) -> bool:
        return await asyncio.to_thread(self._client.from_openai_chat, model, usage, **extra)

    async def from_openai_responses(self, model: str, usage: Any, **extra: Any) -> bool:
        return await asyncio.to_thread(self._client.from_openai_responses, model, usage, **extra)

    async def from_usage(self, provider: str, model: str, usage: Any, api_flavor: Optional[str] = None, **extra: Any) -> bool:
        return await asyncio.to_thread(self._client.from_usage, provider, model, usage, api_flavor, **extra)

    async def from_anthropic(self, model: str, usage: Any, **extra: Any) -> bool:
        return await asyncio.to_thread(self._client.from_anthropic, model, usage, **extra)

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

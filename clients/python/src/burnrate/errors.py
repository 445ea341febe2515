from __future__ import annotations

from typing import Any, Mapping, Optional


class BurnrateError(Exception):
    """A request to burnrate that did not succeed after its retries.

    Handed to ``on_error`` (or logged as a warning on the ``burnrate`` logger); never
    raised out of ``send``, ``refresh``, ``wait_until_resumed``, ``flush``, ``close`` or a guard.

    - ``operation``: ``"config"`` (POST /config), ``"event"`` (POST /events, or one event of a
      batch), ``"refresh"`` (GET /agents/{agent_id}), ``"hold"`` (POST /holds, a guard's
      enter), ``"release"`` (DELETE /holds/{hold_id}, a guard's exit) or ``"batch"`` (POST
      /events/batch as a whole, the buffered mode).
    - ``code``: the server's problem code (``rate_limited``, ``invalid_body``,
      ``unauthorized``, ``store_unavailable`` …), ``http_<status>`` for an answer without
      one, or a local code: ``network_error`` and ``timeout`` (no answer arrived),
      ``invalid_response`` (an answer burnrate would not send); with the buffer,
      ``buffer_full`` (dropped past its bound), ``event_too_large`` (more than a batch may
      carry) and ``not_sent`` (left unsent by ``close()`` or the interpreter's exit).
    - ``status``: HTTP status of the last answer, None when there was none.
    - ``retryable``: whether the last failure is of a kind that is retried (network
      errors, timeouts, 429, 5xx); ``attempts``: requests made, retries included.
    - ``event_id``: the event's id (operation ``"event"``). The underlying exception,
      if any, is ``__cause__``.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str,
        code: str,
        status: Optional[int] = None,
        detail: Optional[str] = None,
        problem: Optional[Mapping[str, Any]] = None,
        retryable: bool = False,
        retry_after: Optional[float] = None,
        attempts: int = 1,
        event_id: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.code = code
        self.status = status
        self.detail = detail
        self.problem = problem
        self.retryable = retryable
        self.retry_after = retry_after
        self.attempts = attempts
        self.event_id = event_id

"""The synchronous client: one instance per agent, safe to share between threads."""

from __future__ import annotations

import functools
import inspect
import logging
import math
import re
import threading
import time
import urllib.parse
import uuid
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Type, TypeVar, Union

from . import usage as _usage
from ._buffer import Batcher, Buffer
from ._periods import Period, PeriodBudget, period_budgets_body, periods_of
from ._transport import Transport
from .errors import BurnrateError

if TYPE_CHECKING:  # typing_extensions for Python 3.9, read by type checkers only (no runtime dependency)
    from typing_extensions import Concatenate, ParamSpec

    P = ParamSpec("P")
R = TypeVar("R")

FailMode = Literal["open", "closed"]

OnError = Callable[[BurnrateError], None]

# Told the alert levels an event crossed (fractions of the budget) and the answer that said so.
OnAlert = Callable[[List[float], Dict[str, Any]], None]

logger = logging.getLogger("burnrate")

# The server's rule for agent_id: 1-128 characters, no C0, DEL or C1.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# The server's bounds for POST /config.
MAX_THRESHOLD_USD = 1_000_000
MAX_WEBHOOK_URL = 2048
MAX_ALERT_LEVELS = 5
# The server's bounds for POST /holds and the token fields.
MAX_TOKENS = 1_000_000_000
MAX_MODEL = 256
MAX_HOLD_TTL_SECONDS = 3600
# The server's UUID rule (zod's uuid()): 8-4-4-4-12 hex, version 1-8, RFC variant, or nil/max.
_UUID = re.compile(
    "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}"
    "|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$"
)


def _number(name: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("%s must be a finite number, got %r" % (name, value))
    if value < 0 or (positive and value == 0):
        raise ValueError("%s must be %s, got %r" % (name, "> 0" if positive else ">= 0", value))
    return float(value)


def _client_id(name: str, value: Any) -> str:
    """An agent_id or run_id as the server takes it: 1-128 characters, no control characters."""
    if not isinstance(value, str) or not 1 <= len(value) <= 128 or _CONTROL.search(value):
        raise ValueError("%s must be 1 to 128 characters without control characters, got %r" % (name, value))
    return value


def _tokens(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        raise ValueError("%s must be an integer from 0 to %d, got %r" % (name, MAX_TOKENS, value))
    return value


# What the buffered mode queues unless told otherwise: events whose answer the agent does not
# wait for. An llm_call's answer says whether the agent may go on: it is sent at once.
_BUFFERED_TYPES = frozenset({"tool_call", "agent_start", "agent_end"})


def _usd(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class Burnrate:
    """Reports one agent's events to burnrate and tells it when to stop.

    ``send`` returns True while the agent may go on and False once burnrate paused it;
    after that it sends nothing until ``refresh`` (or ``wait_until_resumed``) finds the
    agent resumed. An answer that the current run went over its run budget stops that run
    only (``run_stopped``): its events are not sent, until ``end()`` closes it. Failures to
    reach burnrate never raise out of ``send``: with
    ``fail_mode="open"`` (the default) it returns True and reports the error to
    ``on_error`` (default: a warning on the ``burnrate`` logger); with ``"closed"`` it
    returns False.

    With ``buffer`` (``True`` or a ``Buffer``), tool calls, starts, ends and events sent with
    ``buffered=True`` are queued and sent together (POST /events/batch) by a daemon thread;
    see ``Buffer``, ``flush`` and ``close``.
    """

    # AsyncBurnrate sets this to False: it must not block the event loop in __init__.
    _CONFIGURE_ON_INIT = True
    # AsyncBurnrate sets this to True: its buffer is flushed by a task on the running loop.
    _LOOP_FLUSHER = False

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
        if not isinstance(base_url, str):
            raise ValueError("base_url must be a string")
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError("base_url must be an http:// or https:// URL, got %r" % base_url)
        if not isinstance(api_key, str) or not api_key:
            raise ValueError("api_key must be a non-empty string")
        _client_id("agent_id", agent_id)
        if cost_threshold_usd is not None:
            cost_threshold_usd = _number("cost_threshold_usd", cost_threshold_usd)
            if cost_threshold_usd > MAX_THRESHOLD_USD:
                raise ValueError("cost_threshold_usd must be at most %d, got %r" % (MAX_THRESHOLD_USD, cost_threshold_usd))
        if run_budget_usd is not None:
            run_budget_usd = _number("run_budget_usd", run_budget_usd, positive=True)
            if run_budget_usd > MAX_THRESHOLD_USD:
                raise ValueError("run_budget_usd must be at most %d, got %r" % (MAX_THRESHOLD_USD, run_budget_usd))
        if slack_webhook_url is not None and (
            not isinstance(slack_webhook_url, str) or not 1 <= len(slack_webhook_url) <= MAX_WEBHOOK_URL
        ):
            raise ValueError("slack_webhook_url must be a URL of 1 to %d characters, or None" % MAX_WEBHOOK_URL)
        timeout = _number("timeout", timeout, positive=True)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError("max_retries must be an integer >= 0, got %r" % (max_retries,))
        if fail_mode not in ("open", "closed"):
            raise ValueError('fail_mode must be "open" or "closed", got %r' % (fail_mode,))
        if on_error is not None and not callable(on_error):
            raise ValueError("on_error must be callable or None")
        if on_alert is not None and not callable(on_alert):
            raise ValueError("on_alert must be callable or None")
        if alert_at is not None:
            levels = list(alert_at) if isinstance(alert_at, (list, tuple)) else None
            if (
                levels is None
                or len(levels) > MAX_ALERT_LEVELS
                or len(set(levels)) != len(levels)
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < 1 for x in levels)
            ):
                raise ValueError("alert_at must hold at most %d distinct numbers between 0 and 1 (exclusive), got %r" % (MAX_ALERT_LEVELS, alert_at))
            alert_at = levels
        period_budgets_wire = None if period_budgets is None else period_budgets_body(period_budgets)
        if buffer is True:
            buffer = Buffer()
        elif buffer is False:
            buffer = None
        elif buffer is not None and not isinstance(buffer, Buffer):
            raise ValueError("buffer must be True, False, None or a burnrate.Buffer, got %r" % (buffer,))

        self._agent_id = agent_id
        self._fail_mode = fail_mode
        self._on_error = on_error
        self._on_alert = on_alert
        self._transport = Transport(
            base_url,
            api_key,
            timeout=timeout,
            max_retries=max_retries,
            retry_base_delay=_number("retry_base_delay", retry_base_delay),
            retry_max_delay=_number("retry_max_delay", retry_max_delay),
        )
        self._config: Optional[Dict[str, Any]] = None
        if any(x is not None for x in (cost_threshold_usd, slack_webhook_url, alert_at, period_budgets_wire, run_budget_usd)):
            self._config = {"agent_id": agent_id}
            if cost_threshold_usd is not None:
                self._config["cost_threshold_usd"] = cost_threshold_usd
            if slack_webhook_url is not None:
                self._config["slack_webhook_url"] = slack_webhook_url
            if alert_at is not None:
                self._config["alert_at"] = alert_at
            if period_budgets_wire is not None:
                self._config["period_budgets"] = period_budgets_wire
            if run_budget_usd is not None:
                self._config["run_budget_usd"] = run_budget_usd

        # _lock guards the paused flag and whether the config is still to be sent;
        # _config_lock lets one thread at a time send the config (POST /config is once).
        self._lock = threading.Lock()
        self._config_lock = threading.Lock()
        self._paused = False
        self._paused_reason: Optional[str] = None
        self._paused_period: Optional[str] = None
        self._ignoring_pause = False
        # The current run: set by an agent_start, cleared by an agent_end (under _lock); the run
        # burnrate stopped (its run budget spent) and why, cleared when a run begins or ends.
        self._run_id: Optional[str] = None
        self._stopped_run: Optional[str] = None
        self._stopped_reason: Optional[str] = None
        self._last_response: Optional[Dict[str, Any]] = None
        self._config_pending = self._config is not None
        self._config_failed = False  # its last attempt failed: fail_mode="closed" stops
        self._batcher = None if buffer is None else Batcher(self, buffer, loop_flusher=self._LOOP_FLUSHER)

        if self._CONFIGURE_ON_INIT:
            self._ensure_config()

    # -- state ---------------------------------------------------------------------------

    @property
    def agent_id(self) -> str:
        return self._agent_id

    @property
    def fail_mode(self) -> str:
        return self._fail_mode

    @property
    def paused(self) -> bool:
        """True once burnrate answered paused; cleared only by refresh()/wait_until_resumed()."""
        with self._lock:
            return self._paused

    @property
    def paused_reason(self) -> Optional[str]:
        """Why the agent is paused: "budget", "velocity", "period_budget" or "manual" (its own),
        "fleet_budget", "fleet_velocity", "fleet_period_budget" or "fleet_manual" (its user's
        fleet budget); None while it runs. Every reason stops it alike."""
        with self._lock:
            return self._paused_reason if self._paused else None

    @property
    def paused_period(self) -> Optional[str]:
        """With paused_reason "period_budget" or "fleet_period_budget": the period that went over
        its limit ("day", "week", "month" or "window_<n>d"); None otherwise."""
        with self._lock:
            return self._paused_period if self._paused else None

    @property
    def ignoring_pause(self) -> bool:
        """Whether burnrate flagged this agent for calling the model after its pause (something
        sends for it past this client), as of the last ``refresh()``; False before one."""
        with self._lock:
            return self._ignoring_pause

    @property
    def last_response(self) -> Optional[Dict[str, Any]]:
        """The last answer to POST /events (event_id, cost_usd, total_cost_24h, duplicate …)."""
        with self._lock:
            return self._last_response

    @property
    def remaining_usd(self) -> Optional[float]:
        """What is left of the budget as of the last answer (negative when over it); None before one."""
        last = self.last_response
        return None if last is None else last.get("remaining_usd")

    @property
    def projected_exhaustion_at(self) -> Optional[datetime]:
        """When the budget runs out at the last hour's spend rate, as of the last answer; None
        when it never would (or before any answer)."""
        last = self.last_response
        at = None if last is None else last.get("projected_exhaustion_at")
        return None if at is None else datetime.fromisoformat(at.replace("Z", "+00:00"))

    @property
    def periods(self) -> Optional[List[Period]]:
        """The agent's period budgets as of the last answer: each period's spend, limit, what is
        left, its bounds and when it runs out at the last hour's rate. [] without period budgets,
        None before any answer."""
        last = self.last_response
        return None if last is None else periods_of(last.get("periods"))

    @property
    def run_id(self) -> Optional[str]:
        """The current run's id: the one ``start()`` made (a random UUID) or was given
        (``run_id=``), until ``end()``; None outside a run. Every event sent meanwhile carries it."""
        with self._lock:
            return self._run_id

    @property
    def run_stopped(self) -> bool:
        """True once burnrate said the current run went over its run budget (``run_budget_usd``):
        the run is stopped, not the agent. Until ``end()`` the run's calls return False without
        sending and a guard is refused with reason "run_budget"; ``end()`` still sends the run's
        agent_end and clears it, and the next ``start()`` runs normally. ``paused`` stays False
        (unless the agent itself is paused), and ``refresh()`` neither sees nor clears it."""
        with self._lock:
            return self._run_id is not None and self._stopped_run == self._run_id

    @property
    def run_stopped_reason(self) -> Optional[str]:
        """Why the current run is stopped, as burnrate said: "run_budget"; None while it runs (or
        outside a run)."""
        with self._lock:
            return self._stopped_reason if self._run_id is not None and self._stopped_run == self._run_id else None

    @property
    def buffer(self) -> Optional[Buffer]:
        """The buffered mode's options; None when it is off."""
        return None if self._batcher is None else self._batcher.options

    @property
    def pending_events(self) -> int:
        """Buffered events not yet answered by burnrate (queued, or in the batch in flight)."""
        return 0 if self._batcher is None else self._batcher.pending

    def __repr__(self) -> str:
        return "Burnrate(agent_id=%r, paused=%r, fail_mode=%r)" % (self._agent_id, self.paused, self._fail_mode)

    # -- sending -------------------------------------------------------------------------

    def send(self, event: Mapping[str, Any], *, buffered: Optional[bool] = None) -> bool:
        """Post one event (POST /events fields without agent_id). True: the agent may go on.

        With the buffer on, ``buffered`` says whether the event is queued (True) or sent at
        once (False); None: tool_call, agent_start and agent_end are queued, llm_call is sent
        at once. Without a buffer every event is sent at once.

        The event carries the current run's ``run_id`` unless it names one; an agent_start or
        agent_end sent here begins or ends a run as ``start()`` and ``end()`` do."""
        return self._submit(self._in_run(event), buffered)

    def _submit(self, event: Mapping[str, Any], buffered: Optional[bool]) -> bool:
        """send() of an event that has its run already."""
        queued = self._buffer(event, buffered)
        return self._send(event)[0] if queued is None else queued

    def _in_run(self, event: Mapping[str, Any]) -> Mapping[str, Any]:
        """The event with its run: an agent_start begins a new one (named by its own run_id,
        else a new UUID), an agent_end is the current run's last event; any other event carries
        the current run's id unless it names a run itself. Once per event, where it enters the
        client: the run it gets is the one current when it was sent, however late it leaves."""
        self._event_body(event)  # a programming error raises before a run begins or ends
        kind, own = event.get("event_type"), event.get("run_id")
        with self._lock:
            if kind == "agent_start":
                self._run_id = run_id = own if own is not None else str(uuid.uuid4())
            else:
                run_id = own if own is not None else self._run_id
                if kind == "agent_end":
                    self._run_id = None
            if kind in ("agent_start", "agent_end"):
                self._stopped_run = self._stopped_reason = None
        return event if run_id is None or own is not None else dict(event, run_id=run_id)

    def _buffer(self, event: Mapping[str, Any], buffered: Optional[bool]) -> Optional[bool]:
        """Queue the event if it is for the buffer: what send() returns for it, without waiting
        for the network; None when it is to be sent at once."""
        batcher = self._batcher
        if batcher is None or buffered is False:
            return None
        body = self._event_body(event)  # a programming error raises, paused or not
        if buffered is None and body.get("event_type") not in _BUFFERED_TYPES:
            return None
        if self._held_back(body):
            return False  # After paused = true the client sends nothing more; nor for a stopped run.
        if body.get("event_id") is None:
            # Its id from the start: a batch sent again counts it once.
            body["event_id"] = str(uuid.uuid4())
        # What was known before this event: its own flush runs on another thread, and may fail
        # before this line would otherwise read the flag.
        healthy = batcher.healthy
        queued = batcher.add(body)
        if queued is None:
            return None  # closed: sent alone
        if not queued:
            return self._fail_mode == "open"  # dropped (and reported): as if burnrate had failed
        return self._go_on(healthy)

    def _send(self, event: Mapping[str, Any], made: bool = False) -> Tuple[bool, bool]:
        """send(), and whether burnrate acknowledged the event: a guard whose report was not
        acknowledged cannot know its hold settled, so it releases it. ``made``: a guarded call's
        report, sent even once the agent is paused or its run stopped meanwhile: the call was
        made, and its cost is counted (and its hold settled) only so."""
        body = self._event_body(event)
        if not made and self._held_back(body):
            return False, False  # After paused = true the client sends nothing more; nor for a stopped run.

        if body.get("event_id") is None:
            # One id per event, kept across its retries: the server counts a repeat once.
            body["event_id"] = str(uuid.uuid4())

        config_ok = self._ensure_config()
        if not made and self._held_back(body):
            return False, False  # another thread learnt it while this one sent the config
        event_id = str(body["event_id"])
        try:
            answer = self._transport.request("event", "POST", "/events", body, event_id=event_id)
            if not isinstance(answer.get("paused"), bool):
                raise BurnrateError(
                    "POST /events: the answer has no paused flag",
                    operation="event",
                    code="invalid_response",
                    status=200,
                    event_id=event_id,
                )
        except BurnrateError as err:
            self._report(err)
            return self._fail_mode == "open", False
        self._answered(answer, body.get("run_id"))
        # Its own answer decides: paused (the agent, whatever other threads heard meanwhile), or
        # its run stopped, if that is still the current run.
        if answer["paused"] and (answer.get("paused_reason") != "run_budget" or self._stops(body.get("run_id"))):
            return False, True
        # Fail-closed means: go on only with the budget known to be in place.
        return config_ok or self._fail_mode == "open", True

    def _event_body(self, event: Mapping[str, Any]) -> Dict[str, Any]:
        """The event's wire body with the client's agent_id. What the server would refuse for
        certain is a programming error and raises here, paused or not, instead of being retried
        or reported as burnrate's failure."""
        if not isinstance(event, Mapping):
            raise TypeError("event must be a mapping, got %s" % type(event).__name__)
        if "agent_id" in event and event["agent_id"] != self._agent_id:
            raise ValueError("event agent_id %r differs from the client's %r" % (event["agent_id"], self._agent_id))
        body = dict(event)
        body["agent_id"] = self._agent_id
        if body.get("run_id", False) is None:
            del body["run_id"]  # None: no run of its own
        elif "run_id" in body:
            _client_id("run_id", body["run_id"])
        hold_id = body.pop("hold_id", None)  # None: no hold (a guard that could not get one)
        if hold_id is not None:
            if not isinstance(hold_id, str) or not _UUID.match(hold_id):
                raise ValueError("hold_id must be a UUID that POST /holds answered, got %r" % (hold_id,))
            if body.get("event_type") != "llm_call":
                raise ValueError("hold_id is for llm_call events only, got event_type %r" % (body.get("event_type"),))
            body["hold_id"] = hold_id.lower()  # as the server keeps it
        return body

    def llm_call(
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
        """Send an llm_call event; ``extra`` adds event fields such as metadata. ``buffered``:
        queue it (with the buffer on) for a call reported after the fact, whose answer the
        agent does not wait for."""
        return self.send(
            _usage.llm_call_event(model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, **extra),
            buffered=buffered,
        )

    def tool_call(
        self,
        tool_name: str,
        metadata: Optional[Mapping[str, Any]] = None,
        *,
        buffered: Optional[bool] = None,
        run_id: Optional[str] = None,
    ) -> bool:
        """Send a tool_call; ``run_id``: a run of its own instead of the current one."""
        return self.send(_with_run(_usage.tool_call_event(tool_name, metadata), run_id), buffered=buffered)

    def start(
        self, metadata: Optional[Mapping[str, Any]] = None, *, buffered: Optional[bool] = None, run_id: Optional[str] = None
    ) -> bool:
        """Send agent_start, which begins a run: its id is ``run_id`` when given, else a new
        random UUID, and every event after it carries it until ``end()`` (see ``run_id``). A
        start() without an end() before it begins a new run all the same."""
        return self.send(_with_run(_usage.start_event(metadata), run_id), buffered=buffered)

    def end(self, metadata: Optional[Mapping[str, Any]] = None, *, buffered: Optional[bool] = None) -> bool:
        """Send agent_end, the last event of the current run: it carries the run's id, and the
        events after it carry none until the next ``start()``. With the buffer on it is queued
        behind the others and the buffer is flushed: this returns once burnrate answered them
        (or could not be reached)."""
        event = self._in_run(_usage.end_event(metadata))
        batcher = self._batcher
        if batcher is None or batcher.closed:
            return self._submit(event, False)
        if buffered is False:
            batcher.flush()
            return self._submit(event, False)
        queued = self._buffer(event, True)
        if queued is None:  # closed meanwhile
            return self._submit(event, False)
        delivered = batcher.flush()
        if self.paused:
            return False
        return queued and self._go_on(delivered)

    def from_openai_chat(self, model: str, usage: Any, *, buffered: bool = False, **extra: Any) -> bool:
        """Send the llm_call of an OpenAI Chat Completions ``response.usage``."""
        return self.send(_usage.from_openai_chat(model, usage, **extra), buffered=buffered)

    def from_openai_responses(self, model: str, usage: Any, *, buffered: bool = False, **extra: Any) -> bool:
        """Send the llm_call of an OpenAI Responses API ``response.usage``."""
        return self.send(_usage.from_openai_responses(model, usage, **extra), buffered=buffered)

    def from_usage(
        self, provider: str, model: str, usage: Any, api_flavor: Optional[str] = None, *, buffered: bool = False, **extra: Any
    ) -> bool:
        """Send the llm_call of any provider's usage object (provider: the price library's id)."""
        return self.send(_usage.from_usage(provider, model, usage, api_flavor, **extra), buffered=buffered)

    def from_anthropic(self, model: str, usage: Any, *, buffered: bool = False, **extra: Any) -> bool:
        """Send the llm_call of an Anthropic ``message.usage``."""
        return self.send(_usage.from_anthropic(model, usage, **extra), buffered=buffered)

    # -- the buffer ----------------------------------------------------------------------

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Send the buffered events now and wait for burnrate's answer. True once every event
        queued before the call is answered (stored, or refused and reported); False if some
        are still queued (burnrate unreachable, the key's budget spent after max_retries waits
        of Retry-After, or ``timeout`` seconds passed): the flusher sends them later. True
        without a buffer."""
        return True if self._batcher is None else self._batcher.flush(timeout)

    def close(self, timeout: Optional[float] = None) -> bool:
        """Flush the buffer (within ``timeout`` seconds, if given) and turn it off: events left
        unsent are dropped and reported, and later events are sent one by one. True if nothing
        was left. Nothing to do without a buffer."""
        return True if self._batcher is None else self._batcher.close(timeout)

    def __enter__(self) -> Burnrate:
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()

    # -- budget holds --------------------------------------------------------------------

    def guard(
        self, *, model: str, input_tokens: int, max_output_tokens: int, ttl_seconds: Optional[int] = None
    ) -> Guard:
        """A context manager that holds one llm_call's worst case against the budget (POST
        /holds) before the call is made; see ``Guard``. The body must check ``guard.allowed``:
        a ``with`` cannot skip its body."""
        return Guard(self, _hold_body(self._agent_id, model, input_tokens, max_output_tokens, ttl_seconds))

    def guarded(
        self, *, model: str, input_tokens: int, max_output_tokens: int, ttl_seconds: Optional[int] = None
    ) -> Callable[[Callable[Concatenate[Guard, P], R]], Callable[P, Optional[R]]]:
        """A decorator: each call of the function runs under its own ``guard(...)``, which it
        receives as its first argument. When the hold is refused the function is not called
        and the call returns None (use ``guard`` to tell a refusal from a None it returns)."""
        body = _hold_body(self._agent_id, model, input_tokens, max_output_tokens, ttl_seconds)

        def decorate(fn: Callable[Concatenate[Guard, P], R]) -> Callable[P, Optional[R]]:
            if not callable(fn):
                raise TypeError("guarded decorates a function, got %r" % (fn,))
            if inspect.iscoroutinefunction(fn):
                # The hold would be released when the coroutine is created, before it runs.
                raise TypeError("%s is a coroutine function: use AsyncBurnrate.guarded" % getattr(fn, "__name__", fn))

            @functools.wraps(fn)
            def call(*args: P.args, **kwargs: P.kwargs) -> Optional[R]:
                with Guard(self, body) as guard:
                    if not guard.allowed:
                        return None
                    return fn(guard, *args, **kwargs)

            return call

        return decorate

    # -- asking the server ---------------------------------------------------------------

    def refresh(self) -> bool:
        """Ask burnrate whether the agent is paused (e.g. after an operator resumed it),
        update ``paused`` and return it. If burnrate cannot be asked, the error is
        reported and ``paused`` stays as it was."""
        path = "/agents/%s?limit=1" % urllib.parse.quote(self._agent_id, safe="")
        try:
            answer = self._transport.request("refresh", "GET", path)
            paused = answer.get("is_paused")
            if not isinstance(paused, bool):
                raise BurnrateError(
                    "GET /agents/{agent_id}: the answer has no is_paused flag",
                    operation="refresh",
                    code="invalid_response",
                    status=200,
                )
        except BurnrateError as err:
            if err.status != 404 or err.code != "agent_not_found":
                self._report(err)
                return self.paused
            paused = False  # No events and no config: nothing can have paused it.
            answer = {}
        reason, period = answer.get("paused_reason"), answer.get("paused_period")
        with self._lock:
            self._paused = paused
            self._paused_reason = reason if paused and isinstance(reason, str) else None
            self._paused_period = period if paused and isinstance(period, str) else None
            self._ignoring_pause = answer.get("ignoring_pause") is True
        return paused

    def wait_until_resumed(self, poll_interval: float = 5.0, timeout: Optional[float] = None) -> bool:
        """Poll ``refresh`` until the agent runs (True) or ``timeout`` seconds pass (False)."""
        poll_interval = _number("poll_interval", poll_interval, positive=True)
        deadline = None if timeout is None else time.monotonic() + _number("timeout", timeout)
        while True:
            if not self.refresh():
                return True
            if deadline is None:
                time.sleep(poll_interval)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(poll_interval, remaining))

    # -- internals -----------------------------------------------------------------------

    def _ensure_config(self, deadline: Optional[float] = None) -> bool:
        """POST /config until it succeeds once. True if the config is in place."""
        with self._lock:
            if not self._config_pending:
                return True
        with self._config_lock:
            with self._lock:
                if not self._config_pending:
                    return True  # another thread sent it while this one waited
            try:
                self._transport.request("config", "POST", "/config", self._config, deadline=deadline)
            except BurnrateError as err:
                with self._lock:
                    self._config_failed = True
                self._report(err)
                return False
            with self._lock:
                self._config_pending = False
                self._config_failed = False
            return True

    def _go_on(self, delivered: bool) -> bool:
        """What a buffered call answers while the agent is not paused: fail-open goes on;
        fail-closed goes on only while burnrate takes the events and the budget is in place."""
        if self._fail_mode == "open":
            return True
        with self._lock:
            return delivered and not self._config_failed

    def _held_back(self, event: Mapping[str, Any]) -> bool:
        """Whether the client does not send this event: the agent is paused, or the event is of
        the current run and burnrate stopped that run."""
        return self.paused or self._stops(event.get("run_id"))

    def _stops(self, run_id: Optional[str]) -> bool:
        """Whether ``run_id`` is the current run, and burnrate stopped it."""
        with self._lock:
            return run_id is not None and run_id == self._run_id and run_id == self._stopped_run

    def _answered(self, answer: Dict[str, Any], run_id: Optional[str]) -> None:
        """An event's answer (POST /events, or its place in a batch; ``run_id``: the event's
        run): kept, its pause learnt, the alert levels it crossed told."""
        self._learn(answer, event=True, run_id=run_id)
        alerts = answer.get("alerts")
        if self._on_alert is not None and isinstance(alerts, list) and alerts:
            try:
                self._on_alert(list(alerts), answer)
            except Exception:  # the agent must not crash because its alert callback did
                logger.exception("burnrate: the on_alert callback raised")

    def _learn(self, answer: Dict[str, Any], *, event: bool, run_id: Optional[str] = None) -> None:
        """Keep what an answer to POST /events (``event``) or POST /holds about run ``run_id``
        says, in one step: a paused answer of either stops the client: it sends nothing more.
        Paused for "run_budget" is about that run only: it stops the run if it is the current
        one (an answer about an older run, a batch that left late, stops nothing), never the
        agent."""
        with self._lock:
            if event:
                self._last_response = answer
            if answer.get("paused") is True and answer.get("paused_reason") == "run_budget":
                if run_id is not None and run_id == self._run_id:
                    self._stopped_run, self._stopped_reason = run_id, "run_budget"
            elif answer.get("paused") is True:
                self._paused = True
                reason, period = answer.get("paused_reason"), answer.get("paused_period")
                self._paused_reason = reason if isinstance(reason, str) else None
                self._paused_period = period if isinstance(period, str) else None

    def _report(self, err: BurnrateError) -> None:
        if self._on_error is None:
            logger.warning("burnrate: %s", err)
            return
        try:
            self._on_error(err)
        except Exception:  # the agent must not crash because its error callback did
            logger.exception("burnrate: the on_error callback raised")


def _with_run(event: Dict[str, Any], run_id: Optional[str]) -> Dict[str, Any]:
    if run_id is not None:
        event["run_id"] = run_id
    return event


def _hold_body(agent_id: str, model: str, input_tokens: int, max_output_tokens: int, ttl_seconds: Optional[int]) -> Dict[str, Any]:
    """The body of POST /holds, checked as the server would: a bad value is a programming error."""
    if not isinstance(model, str) or not 1 <= len(model) <= MAX_MODEL:
        raise ValueError("model must be 1 to %d characters, got %r" % (MAX_MODEL, model))
    body: Dict[str, Any] = {
        "agent_id": agent_id,
        "model": model,
        "input_tokens": _tokens("input_tokens", input_tokens),
        "max_output_tokens": _tokens("max_output_tokens", max_output_tokens),
    }
    if ttl_seconds is not None:
        if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int) or not 1 <= ttl_seconds <= MAX_HOLD_TTL_SECONDS:
            raise ValueError("ttl_seconds must be an integer from 1 to %d, or None, got %r" % (MAX_HOLD_TTL_SECONDS, ttl_seconds))
        body["ttl_seconds"] = ttl_seconds
    return body


class Guard:
    """One LLM call under a budget hold; ``with client.guard(...) as guard`` or ``@client.guarded``.

    Parallel calls of one agent can each pass a budget check and together overshoot it. On
    enter the guard asks burnrate (POST /holds) to hold the call's worst case (every input
    token and ``max_output_tokens`` of output at the model's prices) against the agent's
    budget and its fleet's, and its run's (the client's current run, ``run_id``). **A ``with`` cannot skip its body: the body must check**
    ``guard.allowed`` **and make the call only when it is True.**

    - ``allowed``: the call may be made. ``reason`` says why not: ``"paused"`` (the agent or
      its fleet; the client is then paused as after a paused event answer, and a client that
      already knows it is paused refuses without asking), ``"budget"`` or ``"fleet_budget"``
      (the worst case does not fit; nothing is held), ``"period_budget"`` or
      ``"fleet_period_budget"`` (it would take a period of the agent's or its fleet's period
      budgets over its limit; nothing is held), ``"run_budget"`` (the run is stopped by its run
      budget, ``paused_reason`` "run_budget", the client's run then stopped too; or the worst
      case would take the run over it, ``paused_reason`` None), or ``"unreachable"`` (burnrate
      could not be asked, with ``fail_mode="closed"``). None when allowed.
    - Burnrate unreachable with ``fail_mode="open"``: allowed without a hold (``hold_id``
      None); the error goes to ``on_error`` and the reports are sent without a hold_id.
    - Report the call with the guard's ``llm_call``, ``from_openai_chat``,
      ``from_openai_responses``, ``from_anthropic`` or ``from_usage``: they send the llm_call
      with ``hold_id``, and burnrate releases the hold and counts the real cost in one step
      (once, even when the event is retried), in the run the guard was entered in
      (``run_id``). They return what ``send`` returns; on a refused guard they raise
      RuntimeError (no call may be reported under it).
    - On exit, a hold no acknowledged report settled (the body raised, returned without
      reporting, or its report did not reach burnrate) is released with DELETE /holds/{id}.
      Errors of that go to ``on_error``, never raised; an exception of the body propagates.

    A guard guards one call: enter it once. Its report methods may be called from any thread.
    """

    model: str
    allowed: bool
    reason: Optional[str]
    hold_id: Optional[str]
    held_usd: float
    worst_case_usd: Optional[float]
    remaining_usd: Optional[float]
    paused_reason: Optional[str]
    paused_period: Optional[str]
    expires_at: Optional[datetime]
    run_id: Optional[str]

    def __init__(self, client: Burnrate, body: Dict[str, Any]) -> None:
        self._client = client
        # A hold of its own, named by the client: the same id on every retry of its request,
        # so a retry whose first answer was lost is the same hold, held once (as event_id is
        # for events).
        self._body = {**body, "hold_id": str(uuid.uuid4())}
        self.model = body["model"]
        self.allowed = False
        self.reason = None
        self.hold_id = None
        self.held_usd = 0.0
        self.worst_case_usd = None
        self.remaining_usd = None
        self.paused_reason = None
        self.paused_period = None
        self.expires_at = None
        self.run_id = None
        # _lock guards whether the guard was entered and whether a report settled its hold.
        self._lock = threading.Lock()
        self._entered = False
        self._settled = False

    @property
    def reported(self) -> bool:
        """True once burnrate acknowledged a report of this guard (its hold, if any, is settled)."""
        with self._lock:
            return self._settled

    def __repr__(self) -> str:
        return "Guard(model=%r, allowed=%r, reason=%r, hold_id=%r)" % (self.model, self.allowed, self.reason, self.hold_id)

    def __enter__(self) -> Guard:
        with self._lock:
            if self._entered:
                raise RuntimeError("a guard guards one call: enter it once")
            self._entered = True
        self._acquire()
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self._release()  # returns None: an exception of the body propagates

    # -- reports ---------------------------------------------------------------------------

    def llm_call(
        self, input_tokens: int, output_tokens: int, cache_read_tokens: int = 0, cache_write_tokens: int = 0, **extra: Any
    ) -> bool:
        """Send the call's llm_call with the guard's model and hold_id."""
        extra = self._with_hold(extra)
        return self._send(
            _usage.llm_call_event(self.model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, **extra)
        )

    def from_openai_chat(self, model: str, usage: Any, **extra: Any) -> bool:
        """Send the llm_call of an OpenAI Chat Completions ``response.usage`` with the hold_id."""
        return self._send(_usage.from_openai_chat(model, usage, **self._with_hold(extra)))

    def from_openai_responses(self, model: str, usage: Any, **extra: Any) -> bool:
        """Send the llm_call of an OpenAI Responses API ``response.usage`` with the hold_id."""
        return self._send(_usage.from_openai_responses(model, usage, **self._with_hold(extra)))

    def from_anthropic(self, model: str, usage: Any, **extra: Any) -> bool:
        """Send the llm_call of an Anthropic ``message.usage`` with the hold_id."""
        return self._send(_usage.from_anthropic(model, usage, **self._with_hold(extra)))

    def from_usage(self, provider: str, model: str, usage: Any, api_flavor: Optional[str] = None, **extra: Any) -> bool:
        """Send the llm_call of any provider's usage object with the hold_id."""
        return self._send(_usage.from_usage(provider, model, usage, api_flavor, **self._with_hold(extra)))

    # -- internals -------------------------------------------------------------------------

    def _with_hold(self, extra: Dict[str, Any]) -> Dict[str, Any]:
        with self._lock:
            entered = self._entered
        if not entered:
            raise RuntimeError("enter the guard (with client.guard(...) as guard) before reporting its call")
        if not self.allowed:
            raise RuntimeError("this guard was refused (%s): no call may be reported under it" % self.reason)
        if "hold_id" in extra:
            raise TypeError("hold_id is the guard's own; report other holds with the client")
        if "buffered" in extra:
            # Its hold is settled by the answer, which the guard waits for.
            raise TypeError("a guard's report is sent at once: buffered is for the client's own calls")
        if self.run_id is not None and extra.get("run_id") is None:
            extra = dict(extra, run_id=self.run_id)  # its run, whatever start() or end() happened meanwhile
        return extra if self.hold_id is None else dict(extra, hold_id=self.hold_id)

    def _send(self, event: Mapping[str, Any]) -> bool:
        go_on, acknowledged = self._client._send(self._client._in_run(event), made=True)
        if acknowledged:
            with self._lock:
                self._settled = True
        return go_on

    def _refuse(self, reason: str, paused_reason: Optional[str] = None, paused_period: Optional[str] = None) -> None:
        self.allowed, self.reason, self.paused_reason, self.paused_period = False, reason, paused_reason, paused_period

    def _known_refusal(self) -> bool:
        """Refuses without asking when the client knows the agent paused or the guard's run stopped."""
        client = self._client
        if client.paused:
            self._refuse("paused", client.paused_reason, client.paused_period)
            return True
        if client._stops(self.run_id):
            self._refuse("run_budget", "run_budget")
            return True
        return False

    def _acquire(self) -> None:
        """POST /holds for the client's agent; the outcome in the guard's attributes."""
        client = self._client
        self.run_id = client.run_id
        if self._known_refusal():  # a paused client, or a stopped run, sends nothing more
            return
        # The hold is judged against the budget this client sets: that goes first.
        config_ok = client._ensure_config()
        if self._known_refusal():  # another thread learnt it meanwhile
            return
        if not config_ok and client.fail_mode == "closed":
            # Fail-closed goes on only with the budget known to be in place, as send() does.
            self._refuse("unreachable")
            return
        # The run's budget holds the worst case too, when the agent has one.
        body = self._body if self.run_id is None else dict(self._body, run_id=self.run_id)
        try:
            answer = client._transport.request("hold", "POST", "/holds", body)
            allowed = answer.get("allowed")
            # Granted: a hold_id the llm_call can carry. Refused: why.
            if not (
                (allowed is True and isinstance(answer.get("hold_id"), str) and _UUID.match(answer["hold_id"]))
                or (allowed is False and isinstance(answer.get("reason"), str))
            ):
                raise BurnrateError(
                    "POST /holds: the answer is neither a granted hold with its hold_id nor a refusal with its reason",
                    operation="hold",
                    code="invalid_response",
                    status=200,
                )
        except BurnrateError as err:
            client._report(err)
            if client.fail_mode == "open":
                self.allowed = True  # unguarded: the call goes on, and its report has no hold_id
            else:
                self._refuse("unreachable")
            return
        client._learn(answer, event=False, run_id=self.run_id)
        self.allowed = allowed
        self.reason = None if allowed else answer["reason"]
        self.hold_id = answer["hold_id"].lower() if allowed else None
        self.held_usd = _usd(answer.get("held_usd")) or 0.0
        self.worst_case_usd = _usd(answer.get("worst_case_usd"))
        self.remaining_usd = _usd(answer.get("remaining_usd"))
        reason, period = answer.get("paused_reason"), answer.get("paused_period")
        self.paused_reason = reason if isinstance(reason, str) else None
        self.paused_period = period if isinstance(period, str) else None
        at = answer.get("expires_at")
        self.expires_at = datetime.fromisoformat(at.replace("Z", "+00:00")) if isinstance(at, str) else None

    def _release(self) -> None:
        """DELETE /holds/{id} unless a report settled the hold; never raises a BurnrateError."""
        with self._lock:
            if self._settled or self.hold_id is None:
                return
        try:
            self._client._transport.request("release", "DELETE", "/holds/" + self.hold_id)
        except BurnrateError as err:
            # Not open any more (expired, or settled by a report whose answer was lost): nothing to do.
            if err.status != 404 or err.code != "hold_not_found":
                self._client._report(err)

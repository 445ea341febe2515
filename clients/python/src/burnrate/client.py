"""The synchronous client: one instance per agent, safe to share between threads."""

from __future__ import annotations

import logging
import math
import re
import threading
import time
import urllib.parse
import uuid
from datetime import datetime
from typing import Any, Callable, Dict, List, Literal, Mapping, Optional, Sequence

from . import usage as _usage
from ._transport import Transport
from .errors import BurnrateError

FailMode = Literal["open", "closed"]

OnError = Callable[[BurnrateError], None]

# Told the alert levels an event crossed (fractions of the budget) and the answer that said so.
OnAlert = Callable[[List[float], Dict[str, Any]], None]

logger = logging.getLogger("burnrate")

# The server's rule for agent_id (DECISIONS.md "Value rules"): 1-128 characters, no C0, DEL or C1.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# The server's bounds for POST /config.
MAX_THRESHOLD_USD = 1_000_000
MAX_WEBHOOK_URL = 2048
MAX_ALERT_LEVELS = 5


def _number(name: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("%s must be a finite number, got %r" % (name, value))
    if value < 0 or (positive and value == 0):
        raise ValueError("%s must be %s, got %r" % (name, "> 0" if positive else ">= 0", value))
    return float(value)


class Burnrate:
    """Reports one agent's events to burnrate and tells it when to stop.

    ``send`` returns True while the agent may go on and False once burnrate paused it;
    after that it sends nothing until ``refresh`` (or ``wait_until_resumed``) finds the
    agent resumed. Failures to reach burnrate never raise out of ``send``: with
    ``fail_mode="open"`` (the default) it returns True and reports the error to
    ``on_error`` (default: a warning on the ``burnrate`` logger); with ``"closed"`` it
    returns False.
    """

    # AsyncBurnrate sets this to False: it must not block the event loop in __init__.
    _CONFIGURE_ON_INIT = True

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
        if not isinstance(base_url, str):
            raise ValueError("base_url must be a string")
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError("base_url must be an http:// or https:// URL, got %r" % base_url)
        if not isinstance(api_key, str) or not api_key:
            raise ValueError("api_key must be a non-empty string")
        if not isinstance(agent_id, str) or not 1 <= len(agent_id) <= 128 or _CONTROL.search(agent_id):
            raise ValueError("agent_id must be 1 to 128 characters without control characters, got %r" % (agent_id,))
        if cost_threshold_usd is not None:
            cost_threshold_usd = _number("cost_threshold_usd", cost_threshold_usd)
            if cost_threshold_usd > MAX_THRESHOLD_USD:
                raise ValueError("cost_threshold_usd must be at most %d, got %r" % (MAX_THRESHOLD_USD, cost_threshold_usd))
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
        if cost_threshold_usd is not None or slack_webhook_url is not None or alert_at is not None:
            self._config = {"agent_id": agent_id}
            if cost_threshold_usd is not None:
                self._config["cost_threshold_usd"] = cost_threshold_usd
            if slack_webhook_url is not None:
                self._config["slack_webhook_url"] = slack_webhook_url
            if alert_at is not None:
                self._config["alert_at"] = alert_at

        # _lock guards the paused flag and whether the config is still to be sent;
        # _config_lock lets one thread at a time send the config (POST /config is once).
        self._lock = threading.Lock()
        self._config_lock = threading.Lock()
        self._paused = False
        self._paused_reason: Optional[str] = None
        self._ignoring_pause = False
        self._last_response: Optional[Dict[str, Any]] = None
        self._config_pending = self._config is not None

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
        """Why the agent is paused: "budget", "velocity" or "manual" (its own), "fleet_budget",
        "fleet_velocity" or "fleet_manual" (its user's fleet budget); None while it runs. Every
        reason stops it alike."""
        with self._lock:
            return self._paused_reason if self._paused else None

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

    def __repr__(self) -> str:
        return "Burnrate(agent_id=%r, paused=%r, fail_mode=%r)" % (self._agent_id, self.paused, self._fail_mode)

    # -- sending -------------------------------------------------------------------------

    def send(self, event: Mapping[str, Any]) -> bool:
        """Post one event (SPEC.md 2.2 fields without agent_id). True: the agent may go on."""
        if not isinstance(event, Mapping):
            raise TypeError("event must be a mapping, got %s" % type(event).__name__)
        if "agent_id" in event and event["agent_id"] != self._agent_id:
            raise ValueError("event agent_id %r differs from the client's %r" % (event["agent_id"], self._agent_id))
        if self.paused:
            return False  # SPEC.md 3: after paused = true the client sends nothing more.

        body = dict(event)
        body["agent_id"] = self._agent_id
        if body.get("event_id") is None:
            # One id per event, kept across its retries: the server counts a repeat once.
            body["event_id"] = str(uuid.uuid4())

        config_ok = self._ensure_config()
        if self.paused:
            return False  # another thread learnt it while this one sent the config
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
            return self._fail_mode == "open"
        with self._lock:
            self._last_response = answer
            if answer["paused"]:
                self._paused = True
                reason = answer.get("paused_reason")
                self._paused_reason = reason if isinstance(reason, str) else None
        alerts = answer.get("alerts")
        if self._on_alert is not None and isinstance(alerts, list) and alerts:
            try:
                self._on_alert(list(alerts), answer)
            except Exception:  # the agent must not crash because its alert callback did
                logger.exception("burnrate: the on_alert callback raised")
        if answer["paused"]:
            return False
        # Fail-closed means: go on only with the budget known to be in place.
        return config_ok or self._fail_mode == "open"

    def llm_call(
        self,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        **extra: Any,
    ) -> bool:
        """Send an llm_call event; ``extra`` adds event fields such as metadata."""
        return self.send(
            _usage.llm_call_event(model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, **extra)
        )

    def tool_call(self, tool_name: str, metadata: Optional[Mapping[str, Any]] = None) -> bool:
        return self.send(_usage.tool_call_event(tool_name, metadata))

    def start(self, metadata: Optional[Mapping[str, Any]] = None) -> bool:
        return self.send(_usage.start_event(metadata))

    def end(self, metadata: Optional[Mapping[str, Any]] = None) -> bool:
        return self.send(_usage.end_event(metadata))

    def from_openai_chat(self, model: str, usage: Any, **extra: Any) -> bool:
        """Send the llm_call of an OpenAI Chat Completions ``response.usage``."""
        return self.send(_usage.from_openai_chat(model, usage, **extra))

    def from_openai_responses(self, model: str, usage: Any, **extra: Any) -> bool:
        """Send the llm_call of an OpenAI Responses API ``response.usage``."""
        return self.send(_usage.from_openai_responses(model, usage, **extra))

    def from_usage(self, provider: str, model: str, usage: Any, api_flavor: Optional[str] = None, **extra: Any) -> bool:
        """Send the llm_call of any provider's usage object (provider: the price library's id)."""
        return self.send(_usage.from_usage(provider, model, usage, api_flavor, **extra))

    def from_anthropic(self, model: str, usage: Any, **extra: Any) -> bool:
        """Send the llm_call of an Anthropic ``message.usage``."""
        return self.send(_usage.from_anthropic(model, usage, **extra))

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
        reason = answer.get("paused_reason")
        with self._lock:
            self._paused = paused
            self._paused_reason = reason if paused and isinstance(reason, str) else None
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

    def _ensure_config(self) -> bool:
        """POST /config until it succeeds once (SPEC.md 4.2). True if the config is in place."""
        with self._lock:
            if not self._config_pending:
                return True
        with self._config_lock:
            with self._lock:
                if not self._config_pending:
                    return True  # another thread sent it while this one waited
            try:
                self._transport.request("config", "POST", "/config", self._config)
            except BurnrateError as err:
                self._report(err)
                return False
            with self._lock:
                self._config_pending = False
            return True

    def _report(self, err: BurnrateError) -> None:
        if self._on_error is None:
            logger.warning("burnrate: %s", err)
            return
        try:
            self._on_error(err)
        except Exception:  # the agent must not crash because its error callback did
            logger.exception("burnrate: the on_error callback raised")

"""HTTP to burnrate with bounded retries: urllib only, one opener per call (thread-safe)."""

from __future__ import annotations

import email.utils
import http.client
import json
import logging
import random
import socket
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from email.message import Message
from typing import Any, Dict, Mapping, Optional, Tuple

from ._version import __version__
from .errors import BurnrateError

logger = logging.getLogger("burnrate")

# 429 and 5xx may succeed later; every other status is the server's final word
# (400 invalid, 401 key, 404, 413 too large, 415 not JSON: a retry would get the same).
_RETRYABLE_STATUS = frozenset({429}) | frozenset(range(500, 600))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # urllib would follow a redirect with the x-api-key header to wherever it points,
    # and turn a POST into a GET; burnrate never redirects, so a 3xx is an error.
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Retry-After is delay-seconds or an HTTP-date (RFC 9110 section 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def _problem(body: bytes) -> Optional[Dict[str, Any]]:
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return parsed if isinstance(parsed, dict) else None


class Transport:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float,
        max_retries: int,
        retry_base_delay: float,
        retry_max_delay: float,
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._timeout = timeout
        self._max_retries = max_retries
        self._base_delay = retry_base_delay
        self._max_delay = retry_max_delay

    @property
    def max_retries(self) -> int:
        return self._max_retries

    def request(
        self,
        operation: str,
        method: str,
        path: str,
        body: Optional[Mapping[str, Any]] = None,
        event_id: Optional[str] = None,
        deadline: Optional[float] = None,
    ) -> Dict[str, Any]:
        """Send one request, retrying what may succeed later; the JSON answer or BurnrateError.

        The body is serialised once, so every attempt of an event carries the same event_id.
        """
        data = None if body is None else json.dumps(body, default=str).encode("utf-8")
        return self.exchange(operation, method, path, data, event_id=event_id, deadline=deadline)[0]

    def exchange(
        self,
        operation: str,
        method: str,
        path: str,
        data: Optional[bytes],
        *,
        event_id: Optional[str] = None,
        deadline: Optional[float] = None,
    ) -> Tuple[Dict[str, Any], Optional[Message]]:
        """``request`` with a body already serialised, answering the JSON and the answer's
        headers (a batch's Retry-After comes with a 200). ``deadline`` (time.monotonic()):
        no attempt waits past it and no retry starts that would end after it."""
        attempt = 0
        while True:
            attempt += 1
            timeout = self._timeout
            if deadline is not None:
                # The first attempt always goes; a short one still gets a chance to answer.
                timeout = max(0.05, min(timeout, deadline - time.monotonic()))
            try:
                return self._once(operation, method, path, data, event_id, timeout)
            except BurnrateError as err:
                err.attempts = attempt
                if not err.retryable or attempt > self._max_retries:
                    raise
                delay = self.delay(attempt, err.retry_after)
                if deadline is not None and time.monotonic() + delay >= deadline:
                    raise
                logger.debug("burnrate: %s %s failed (%s); retry %d in %.2fs", method, path, err, attempt, delay)
                time.sleep(delay)

    def delay(self, attempt: int, retry_after: Optional[float]) -> float:
        """How long to wait before retry ``attempt`` (1-based): the server's Retry-After when it
        gave one, else exponential backoff; at most retry_max_delay."""
        if retry_after is not None:
            # The server said when; a little jitter keeps a fleet from returning in step.
            return min(self._max_delay, retry_after * random.uniform(1.0, 1.1))
        # Exponential backoff with "equal jitter": half fixed, half random.
        ceiling = min(self._max_delay, self._base_delay * 2.0 ** (attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def _once(
        self, operation: str, method: str, path: str, data: Optional[bytes], event_id: Optional[str], timeout: float
    ) -> Tuple[Dict[str, Any], Optional[Message]]:
        headers = {
            "x-api-key": self._api_key,
            "accept": "application/json",
            "user-agent": "burnrate-python/" + __version__,
        }
        if data is not None:
            headers["content-type"] = "application/json"
        req = urllib.request.Request(self._base_url + path, data=data, headers=headers, method=method)
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=timeout) as resp:
                status, raw, headers = resp.status, resp.read(), resp.headers
        except urllib.error.HTTPError as err:
            raise self._http_error(operation, method, path, err, event_id) from err
        except (OSError, http.client.HTTPException) as err:
            # Refused, reset, closed before an answer, timed out, DNS: no answer arrived,
            # so the event may or may not be stored. Retrying with its event_id is safe.
            reason = err.reason if isinstance(err, urllib.error.URLError) else err
            timed_out = isinstance(reason, socket.timeout)  # TimeoutError from 3.10 on
            raise BurnrateError(
                "%s %s: %s (%s: %s)"
                % (method, path, "no answer in time" if timed_out else "no answer", type(reason).__name__, reason),
                operation=operation,
                code="timeout" if timed_out else "network_error",
                retryable=True,
                event_id=event_id,
            ) from err
        parsed = _problem(raw)
        if parsed is None:
            raise BurnrateError(
                "%s %s: answer %d is not a JSON object" % (method, path, status),
                operation=operation,
                code="invalid_response",
                status=status,
                event_id=event_id,
            )
        return parsed, headers

    def _http_error(
        self, operation: str, method: str, path: str, err: urllib.error.HTTPError, event_id: Optional[str]
    ) -> BurnrateError:
        try:
            raw = err.read()
        except (OSError, http.client.HTTPException):
            raw = b""
        problem = _problem(raw)
        code, detail = "http_%d" % err.code, None
        if problem is not None:
            if isinstance(problem.get("code"), str):
                code = problem["code"]
            if isinstance(problem.get("detail"), str):
                detail = problem["detail"]
        retry_after = parse_retry_after(err.headers.get("retry-after")) if err.headers else None
        message = "%s %s: HTTP %d %s%s" % (method, path, err.code, code, ": " + detail if detail else "")
        return BurnrateError(
            message,
            operation=operation,
            event_id=event_id,
            status=err.code,
            code=code,
            detail=detail,
            problem=problem,
            retryable=err.code in _RETRYABLE_STATUS,
            retry_after=retry_after if err.code in (429, 503) else None,
        )


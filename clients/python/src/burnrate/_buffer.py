"""Buffered mode: events the agent does not wait for, queued and sent with POST /events/batch.

The queue is the client's, shared by its threads under one lock. One batch is in flight at a
time (``_sending``); a flusher (a daemon thread for ``Burnrate``, a task on the running loop
for ``AsyncBurnrate``) runs only while events are queued and sends them when the buffer is
full, when its oldest event is ``max_age`` old, and after a Retry-After.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Optional, Tuple

from ._transport import parse_retry_after
from .errors import BurnrateError

if TYPE_CHECKING:
    from .client import Burnrate

logger = logging.getLogger("burnrate")

# The server's bounds for POST /events/batch.
MAX_BATCH_EVENTS = 1000
MAX_BATCH_BYTES = 4 * 1024 * 1024
_HEAD, _TAIL = b'{"events":[', b"]}"


def _positive(name: str, value: Any, *, integer: bool) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0 or value == float("inf"):
        raise ValueError("%s must be %s > 0, got %r" % (name, "an integer" if integer else "a finite number", value))


@dataclass(frozen=True)
class Buffer:
    """Options of the buffered mode (``Burnrate(..., buffer=Buffer(...))``; ``buffer=True``
    takes these defaults).

    - ``max_events``: a flush starts when this many events are queued (1 to 1000, a batch's
      bound). Default 100.
    - ``max_age``: seconds an event may wait: a flush starts when the oldest queued event is
      this old. Default 1.0.
    - ``max_queued``: events held at most, the batch in flight included; past it a new event
      is dropped and reported (``buffer_full``). Default 10,000 (at least ``max_events``).
    - ``exit_timeout``: seconds the interpreter's exit may spend flushing a ``Burnrate``'s
      buffer (an ``atexit`` hook); 0: no flush at exit. Default 5.0.
    """

    max_events: int = 100
    max_age: float = 1.0
    max_queued: int = 10_000
    exit_timeout: float = 5.0

    def __post_init__(self) -> None:
        _positive("max_events", self.max_events, integer=True)
        if self.max_events > MAX_BATCH_EVENTS:
            raise ValueError("max_events must be at most %d (a batch's bound), got %r" % (MAX_BATCH_EVENTS, self.max_events))
        _positive("max_age", self.max_age, integer=False)
        _positive("max_queued", self.max_queued, integer=True)
        if self.max_queued < self.max_events:
            raise ValueError("max_queued (%r) must be at least max_events (%r)" % (self.max_queued, self.max_events))
        if (
            isinstance(self.exit_timeout, bool)
            or not isinstance(self.exit_timeout, (int, float))
            or not 0 <= self.exit_timeout < float("inf")
        ):
            raise ValueError("exit_timeout must be a finite number >= 0, got %r" % (self.exit_timeout,))


class _Entry:
    __slots__ = ("seq", "event_id", "run_id", "data", "queued_at")

    def __init__(self, seq: int, event_id: str, run_id: Optional[str], data: bytes, queued_at: float) -> None:
        self.seq = seq
        self.event_id = event_id
        self.run_id = run_id  # its answer is about this run: a run_budget stop of it stops no later run
        self.data = data
        self.queued_at = queued_at


# What a round did: nothing to send, a batch answered, some of it refused for the key's
# budget (queued again), the request failed (queued again, or dropped when final), or the
# deadline passed before it could start.
EMPTY, SENT, RATE_LIMITED, FAILED, TIMED_OUT = "empty", "sent", "rate_limited", "failed", "timed_out"


class Batcher:
    """The queue of one client's buffered events and the rounds that send it."""

    def __init__(self, client: Burnrate, options: Buffer, *, loop_flusher: bool = False) -> None:
        self._client = client
        self.options = options
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._sending = threading.Lock()  # one batch in flight at a time, in queue order
        self._queue: Deque[_Entry] = deque()
        self._in_flight: List[_Entry] = []
        self._seq = 0
        self._rate_limited_until = 0.0  # the server's Retry-After for events it refused
        self._backoff_until = 0.0  # after a failed request: the flusher waits, flush() does not
        self._failures = 0  # requests failed in a row
        self._healthy = True  # False while the last request failed: fail_mode="closed" stops
        self._dropped_full = 0  # events dropped since the buffer became full
        self._closed = False
        self._runner: _Runner = _LoopRunner(self) if loop_flusher else _ThreadRunner(self)
        if options.exit_timeout > 0:
            _at_exit.add(self)

    # -- state -----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed

    @property
    def healthy(self) -> bool:
        with self._lock:
            return self._healthy

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue) + len(self._in_flight)

    # -- queueing --------------------------------------------------------------------------

    def add(self, body: Dict[str, Any]) -> Optional[bool]:
        """Queue one event (its wire body, event_id set). True: queued; False: dropped and
        reported (too large, or the buffer is full); None: closed, the caller sends it itself."""
        data = json.dumps(body, default=str).encode("utf-8")
        event_id = str(body["event_id"])
        if len(_HEAD) + len(data) + len(_TAIL) > MAX_BATCH_BYTES:
            self._client._report(
                BurnrateError(
                    "event of %d bytes: more than a batch may carry (%d bytes); dropped" % (len(data), MAX_BATCH_BYTES),
                    operation="event",
                    code="event_too_large",
                    event_id=event_id,
                )
            )
            return False
        with self._lock:
            if self._closed:
                return None
            if len(self._queue) + len(self._in_flight) >= self.options.max_queued:
                self._dropped_full += 1
                first = self._dropped_full == 1
            else:
                self._seq += 1
                self._queue.append(_Entry(self._seq, event_id, body.get("run_id"), data, time.monotonic()))
                self._runner.ensure()
                if len(self._queue) >= self.options.max_events:
                    self._runner.wake()
                return True
        if first:  # once per spell of being full; how many were dropped is told when room is found
            self._client._report(
                BurnrateError(
                    "the buffer holds its bound of %d events (burnrate unreachable or the key's budget spent?); "
                    "new events are dropped until there is room" % self.options.max_queued,
                    operation="event",
                    code="buffer_full",
                    event_id=event_id,
                )
            )
        return False

    # -- flushing --------------------------------------------------------------------------

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Send every event queued before the call; True once none of them is left to send (each
        stored, or dropped as the server refused it), False if some are still queued: burnrate
        unreachable, the key's budget still spent after max_retries waits, or ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._lock:
            target = self._seq
        waits = 0
        while True:
            with self._lock:
                if not self._pending_upto(target):
                    return True
                wait = self._rate_limited_until - time.monotonic()
            if wait > 0:
                # The server said when the key's budget allows more; flush() waits that long,
                # at most max_retries times, as a request's retries do.
                waits += 1
                if waits > self._client._transport.max_retries:
                    return False
                if deadline is not None and time.monotonic() + wait > deadline:
                    return False
                time.sleep(wait)
                continue
            outcome = self._round(deadline=deadline, background=False)
            if outcome in (FAILED, TIMED_OUT):
                return False

    def close(self, timeout: Optional[float] = None, when: str = "close()") -> bool:
        """Flush, then stop buffering: what is left is dropped and reported, and events sent
        after this go out one by one (POST /events)."""
        delivered = self.flush(timeout)
        with self._lock:
            self._closed = True
            left = len(self._queue)
            self._queue.clear()
            self._runner.wake()
        _at_exit.discard(self)
        if left:
            self._report_unsent(left, when)
        return delivered and left == 0

    def _pending_upto(self, seq: int) -> bool:
        """Whether an event queued with a number up to ``seq`` is queued or in flight. The queue
        is in order (events queued again go back in front of newer ones)."""
        return bool(
            (self._queue and self._queue[0].seq <= seq) or any(e.seq <= seq for e in self._in_flight)
        )

    def _due_in(self, now: float) -> float:
        """Seconds until the flusher should send (<= 0: now); the queue is not empty."""
        due = now if len(self._queue) >= self.options.max_events else self._queue[0].queued_at + self.options.max_age
        return max(due, self._rate_limited_until, self._backoff_until) - now

    def _take(self) -> List[_Entry]:
        """The front of the queue, as much as one batch carries."""
        batch: List[_Entry] = []
        size = len(_HEAD) + len(_TAIL)
        while self._queue and len(batch) < MAX_BATCH_EVENTS:
            entry = self._queue[0]
            if batch and size + 1 + len(entry.data) > MAX_BATCH_BYTES:
                break
            size += len(entry.data) + (1 if batch else 0)
            batch.append(self._queue.popleft())
        return batch

    def _round(self, *, deadline: Optional[float], background: bool) -> str:
        """Send one batch from the front of the queue and settle its answer."""
        if deadline is None:
            self._sending.acquire()
        elif not self._sending.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return TIMED_OUT
        answers: List[Tuple[Dict[str, Any], Optional[str]]] = []
        errors: List[BurnrateError] = []
        dropped_full = 0
        try:
            with self._lock:
                now = time.monotonic()
                if now < self._rate_limited_until or (background and now < self._backoff_until):
                    return RATE_LIMITED if now < self._rate_limited_until else FAILED
                batch = self._take()
                if not batch:
                    return EMPTY
                self._in_flight = batch
                if self._dropped_full and len(self._queue) + len(batch) < self.options.max_queued:
                    dropped_full, self._dropped_full = self._dropped_full, 0
            if dropped_full:
                logger.warning("burnrate: %d events were dropped while the buffer was full", dropped_full)
            try:
                outcome = self._send(batch, deadline, answers, errors)
            except BaseException:
                with self._lock:  # not settled: back in front, so that no flush waits for them forever
                    self._queue.extendleft(reversed(self._in_flight))
                    self._in_flight = []
                raise
        finally:
            self._sending.release()
        # The callbacks run with no lock held: one may flush, or send, itself.
        for answer, run_id in answers:
            self._client._answered(answer, run_id)
        for err in errors:
            self._client._report(err)
        return outcome

    def _send(
        self, batch: List[_Entry], deadline: Optional[float], answers: List[Tuple[Dict[str, Any], Optional[str]]], errors: List[BurnrateError]
    ) -> str:
        client = self._client
        client._ensure_config(deadline)  # the budget goes first, as before an event sent alone
        body = _HEAD + b",".join(e.data for e in batch) + _TAIL
        try:
            answer, headers = client._transport.exchange("batch", "POST", "/events/batch", body, deadline=deadline)
            results = answer.get("results")
            if not isinstance(results, list) or len(results) != len(batch):
                raise BurnrateError(
                    "POST /events/batch: the answer has no result per event (%d events sent)" % len(batch),
                    operation="batch",
                    code="invalid_response",
                    status=200,
                )
        except BurnrateError as err:
            return self._failed(batch, err, errors)

        again: List[_Entry] = []
        for entry, result in zip(batch, results):
            if not isinstance(result, dict):
                result = {}
            if result.get("ok") is True and isinstance(result.get("paused"), bool):
                answers.append((result, entry.run_id))
            elif result.get("ok") is False and result.get("status") == 429:
                again.append(entry)  # past the key's budget of events: it stays queued
            else:
                errors.append(_refused(entry, result))
        retry_after = parse_retry_after(headers.get("retry-after")) if headers is not None else None
        with self._lock:
            self._in_flight = []
            self._failures, self._backoff_until, self._healthy = 0, 0.0, True
            if not again:
                return SENT
            if self._closed:
                errors.append(_unsent(len(again), "the buffer was closed"))
                return SENT
            self._queue.extendleft(reversed(again))
            self._rate_limited_until = time.monotonic() + client._transport.delay(1, retry_after)
            self._runner.ensure()
            return RATE_LIMITED

    def _failed(self, batch: List[_Entry], err: BurnrateError, errors: List[BurnrateError]) -> str:
        """The whole request failed after its retries: a failure that may pass (no answer, 429,
        5xx) keeps the events queued, in front, for the flusher to send again after a backoff;
        a final one (401, 404, 413, an answer burnrate would not send) drops them."""
        if err.status == 404 and err.code == "not_found":
            err.args = (str(err) + " (a burnrate server without POST /events/batch? update it, or turn the buffer off)",)
        err.args = ("%s; %d events %s" % (err, len(batch), "kept to send again" if err.retryable else "dropped"),)
        errors.append(err)
        with self._lock:
            self._in_flight = []
            self._healthy = False
            if not err.retryable:
                return FAILED
            if self._closed:
                errors.append(_unsent(len(batch), "the buffer was closed"))
                return FAILED
            self._failures += 1
            self._queue.extendleft(reversed(batch))
            self._backoff_until = time.monotonic() + self._client._transport.delay(self._failures, err.retry_after)
            self._runner.ensure()
        return FAILED

    def _report_unsent(self, count: int, when: str) -> None:
        self._client._report(_unsent(count, when))

    # -- the flusher's loop ------------------------------------------------------------------

    def _next(self) -> Optional[float]:
        """For a flusher: None when it should stop (nothing queued, or closed), else the seconds
        to wait before its next round (<= 0: now). Called with the lock held."""
        if self._closed or not self._queue:
            return None
        return self._due_in(time.monotonic())

    def _background_round(self) -> None:
        try:
            self._round(deadline=None, background=True)
        except Exception:  # a bug here must not kill the flusher and strand the queue
            logger.exception("burnrate: flushing the buffer failed")
            with self._lock:
                self._backoff_until = time.monotonic() + self.options.max_age


def _refused(entry: _Entry, result: Dict[str, Any]) -> BurnrateError:
    """An event the server refused in its place (400 invalid, 404 another agent's hold …):
    final, dropped."""
    status = result.get("status") if isinstance(result.get("status"), int) else None
    code = result.get("code") if isinstance(result.get("code"), str) else ("http_%d" % status if status else "invalid_response")
    detail = result.get("detail") if isinstance(result.get("detail"), str) else None
    return BurnrateError(
        "POST /events/batch: event %s refused: %s%s%s; dropped"
        % (entry.event_id, status if status is not None else "no answer", " " + code, ": " + detail if detail else ""),
        operation="event",
        code=code,
        status=status,
        detail=detail,
        problem=result or None,
        event_id=entry.event_id,
    )


def _unsent(count: int, when: str) -> BurnrateError:
    return BurnrateError(
        "%d buffered events were not sent before %s; dropped" % (count, when),
        operation="batch",
        code="not_sent",
    )


# -- flushers --------------------------------------------------------------------------------


class _Runner:
    def ensure(self) -> None:
        """Start the flusher unless it runs (the batcher's lock is held)."""
        raise NotImplementedError

    def wake(self) -> None:
        """Tell the flusher to look again now (the batcher's lock is held)."""
        raise NotImplementedError


class _ThreadRunner(_Runner):
    """A daemon thread while events are queued: it never keeps the interpreter alive."""

    def __init__(self, batcher: Batcher) -> None:
        self._b = batcher
        self._thread: Optional[threading.Thread] = None

    def ensure(self) -> None:
        if self._thread is not None or self._b._closed:
            return
        thread = threading.Thread(target=self._run, name="burnrate-flusher:" + self._b._client.agent_id, daemon=True)
        try:
            thread.start()
        except RuntimeError:  # the interpreter is shutting down: the exit flush sends the queue
            return
        self._thread = thread

    def wake(self) -> None:
        self._b._wakeup.notify_all()

    def _run(self) -> None:
        b = self._b
        while True:
            with b._lock:
                while True:
                    wait = b._next()
                    if wait is None:
                        self._thread = None  # in the same step as the check: add() starts another
                        return
                    if wait <= 0:
                        break
                    b._wakeup.wait(wait)
            b._background_round()


class _LoopRunner(_Runner):
    """A task on the running event loop (AsyncBurnrate). Where no loop runs (the client's
    ``sync`` side used from a thread, or after the loop closed), a daemon thread instead."""

    def __init__(self, batcher: Batcher) -> None:
        self._b = batcher
        self._task: Optional[asyncio.Task[None]] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._event: Optional[asyncio.Event] = None
        self._starting = False
        self._thread = _ThreadRunner(batcher)

    def _alive(self) -> bool:
        return self._task is not None and not self._task.done() and self._loop is not None and not self._loop.is_closed()

    def ensure(self) -> None:
        if self._alive() or self._starting or self._b._closed:
            return
        try:
            loop: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            self._start(loop)
            return
        if self._loop is not None and self._loop.is_running():
            # Queued again from a worker thread (the client's rounds run in asyncio.to_thread):
            # the task starts on the client's loop.
            try:
                self._loop.call_soon_threadsafe(self._start_soon)
                self._starting = True
                return
            except RuntimeError:  # the loop closed meanwhile
                pass
        self._thread.ensure()

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop, self._event = loop, asyncio.Event()
        self._task = loop.create_task(self._run())

    def _start_soon(self) -> None:
        with self._b._lock:
            self._starting = False
            if not self._alive() and not self._b._closed and self._b._queue:
                self._start(asyncio.get_running_loop())

    def wake(self) -> None:
        self._thread.wake()
        if not self._alive():
            return
        assert self._loop is not None and self._event is not None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._event.set()
            return
        try:
            self._loop.call_soon_threadsafe(self._event.set)
        except RuntimeError:  # the loop closed meanwhile: its task is gone with it
            pass

    async def _run(self) -> None:
        b = self._b
        me = asyncio.current_task()
        event = self._event
        assert event is not None
        try:
            while True:
                with b._lock:
                    wait = b._next()
                    if wait is None:
                        self._task = None  # in the same step as the check: add() starts another
                        return
                    event.clear()
                if wait > 0:
                    try:
                        await asyncio.wait_for(event.wait(), wait)
                    except asyncio.TimeoutError:
                        pass
                    continue
                await asyncio.to_thread(b._background_round)
        finally:
            with b._lock:
                if self._task is me:
                    self._task = None


# -- the interpreter's exit ------------------------------------------------------------------


class _AtExit:
    """Flushes the buffers still open when the interpreter exits, each within its exit_timeout.
    Weak references: a client that is gone has nothing queued (a queued event keeps its
    flusher, and so its buffer, alive)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: "weakref.WeakSet[Batcher]" = weakref.WeakSet()
        self._registered = False

    def add(self, batcher: Batcher) -> None:
        with self._lock:
            self._open.add(batcher)
            if not self._registered:
                atexit.register(self.run)
                self._registered = True

    def discard(self, batcher: Batcher) -> None:
        with self._lock:
            self._open.discard(batcher)

    def run(self) -> None:
        with self._lock:
            batchers = list(self._open)
        for batcher in batchers:
            try:
                batcher.close(batcher.options.exit_timeout, "the interpreter's exit")
            except Exception:
                logger.exception("burnrate: flushing the buffer at exit failed")


_at_exit = _AtExit()


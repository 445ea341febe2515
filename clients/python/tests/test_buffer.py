"""Buffered mode, synchronous client: tool calls, starts, ends and llm_calls marked buffered
go out together with POST /events/batch, through a real proxy that counts and misbehaves,
into a real burnrate: flushed by size, by age, on end(), flush(), close() and the exit;
retried without double counting; paused, rate-limited and invalid results handled in place."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
import unittest
import urllib.parse
from typing import Any, Dict, List, Set, Tuple

from burnrate import AsyncBurnrate, Buffer, Burnrate, BurnrateError

from .support import Api, ModuleServer, Plan, Proxy, Seen, dead_url, unique, wait_for

S = ModuleServer()

# gpt-4o: 1000 in / 500 out = 0.0075 USD; two calls cross 0.01.
COST = 0.0075


def setUpModule() -> None:
    S.start("py-buffer")


def tearDownModule() -> None:
    S.stop()


def forward(method: str, path: str, n: int) -> object:
    return "forward"


def batches(proxy: Proxy) -> List[Seen]:
    return proxy.requests("POST", "/events/batch")


def batch_ids(seen: Seen) -> List[str]:
    return [e["event_id"] for e in seen.body["events"]]


def stored(agent: str, api: Api = None) -> List[Dict[str, Any]]:  # type: ignore[assignment]
    """The agent's events as burnrate stores them, once every acknowledged one is readable."""
    api = api or S.api
    api.drained()
    status, body = api.call("GET", "/agents/%s?limit=1000" % urllib.parse.quote(agent, safe=""))
    if status != 200:
        raise AssertionError("GET /agents/%s: %d %r" % (agent, status, body))
    return body["events"]  # type: ignore[no-any-return]


def listed(agent: str, api: Api = None) -> Dict[str, Any]:  # type: ignore[assignment]
    """The agent's row of GET /agents."""
    api = api or S.api
    api.drained()
    status, body = api.call("GET", "/agents")
    assert status == 200, (status, body)
    rows = [a for a in body["agents"] if a["agent_id"] == agent]
    assert len(rows) == 1, body
    return rows[0]  # type: ignore[no-any-return]


def types(events: List[Dict[str, Any]]) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for e in events:
        counts[e["event_type"]] = counts.get(e["event_type"], 0) + 1
    return counts


class BufferTest(unittest.TestCase):
    def setUp(self) -> None:
        self.errors: List[BurnrateError] = []

    def client(self, plan: Plan = forward, buffer: Any = True, key: str = "", **kwargs: Any) -> Tuple[Burnrate, Proxy, str]:
        proxy = Proxy(S.url, plan)
        self.addCleanup(proxy.close)
        agent = unique("buf")
        options: Dict[str, Any] = dict(
            base_url=proxy.url, api_key=key or S.key, agent_id=agent, on_error=self.errors.append,
            retry_base_delay=0.02, retry_max_delay=2.0, buffer=buffer,
        )
        options.update(kwargs)
        br = Burnrate(**options)
        self.addCleanup(br.close, 10)
        return br, proxy, agent

    def test_tool_calls_starts_ends_and_flagged_llm_calls_go_out_in_one_batch_and_are_stored(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_age=60))
        self.assertIs(br.start(), True)
        for i in range(5):
            self.assertIs(br.tool_call("search", {"i": i}), True)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500, buffered=True), True)
        self.assertIs(br.from_openai_chat("gpt-4o", {"prompt_tokens": 1000, "completion_tokens": 500}, buffered=True), True)
        self.assertEqual(br.pending_events, 8)
        self.assertEqual(batches(proxy), [])  # nothing left the process yet
        self.assertIs(br.end(), True)  # queued last, then the buffer is flushed and answered

        self.assertEqual(proxy.requests("POST", "/events"), [])
        (batch,) = batches(proxy)
        sent = batch.body["events"]
        self.assertEqual(
            [e["event_type"] for e in sent],
            ["agent_start"] + ["tool_call"] * 5 + ["llm_call"] * 2 + ["agent_end"],
        )
        self.assertEqual({e["agent_id"] for e in sent}, {agent})
        ids = batch_ids(batch)
        self.assertEqual(len(set(ids)), 9)
        self.assertEqual(br.pending_events, 0)
        self.assertEqual(listed(agent)["llm_calls"], 2)
        events = stored(agent)
        self.assertEqual({e["event_id"] for e in events}, set(ids))
        self.assertEqual(types(events), {"agent_start": 1, "tool_call": 5, "llm_call": 2, "agent_end": 1})
        self.assertAlmostEqual(S.api.agent(agent)["total_cost_usd"], 2 * COST, places=9)
        self.assertEqual(br.last_response["event_id"], ids[-1])  # type: ignore[index]
        self.assertEqual(self.errors, [])

    def test_a_full_buffer_is_flushed_by_size(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_events=5, max_age=60))
        names = ["t%d" % i for i in range(13)]
        for name in names[:5]:
            self.assertIs(br.tool_call(name), True)
        self.assertTrue(wait_for(lambda: len(batches(proxy)) == 1 and br.pending_events == 0))
        for name in names[5:9]:
            br.tool_call(name)
        self.assertEqual((len(batches(proxy)), br.pending_events), (1, 4))  # under max_events, younger than max_age
        br.tool_call(names[9])  # the fifth: a batch goes
        self.assertTrue(wait_for(lambda: len(batches(proxy)) == 2 and br.pending_events == 0))
        for name in names[10:]:
            br.tool_call(name)
        self.assertIs(br.flush(), True)
        self.assertEqual([len(s.body["events"]) for s in batches(proxy)], [5, 5, 3])
        self.assertEqual([e["tool_name"] for s in batches(proxy) for e in s.body["events"]], names)  # in order
        self.assertEqual(len(stored(agent)), 13)
        self.assertEqual(self.errors, [])

    def test_the_oldest_event_is_flushed_by_age(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_age=0.3))
        queued_at = time.monotonic()
        br.start()
        br.tool_call("search")
        br.tool_call("fetch")
        self.assertTrue(wait_for(lambda: len(batches(proxy)) == 1 and br.pending_events == 0))
        (batch,) = batches(proxy)
        self.assertGreaterEqual(batch.at - queued_at, 0.3)
        self.assertEqual(len(batch.body["events"]), 3)
        self.assertEqual(types(stored(agent)), {"agent_start": 1, "tool_call": 2})
        self.assertEqual(self.errors, [])

    def test_flush_sends_at_once_and_answers_when_stored(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_age=60))
        for name in ("a", "b", "c"):
            br.tool_call(name)
        self.assertIs(br.flush(), True)
        self.assertEqual(len(batches(proxy)), 1)
        self.assertEqual(br.pending_events, 0)
        self.assertIs(br.flush(), True)  # nothing queued: no request
        self.assertEqual(len(batches(proxy)), 1)
        self.assertEqual(len(stored(agent)), 3)

    def test_an_llm_call_without_the_flag_is_sent_at_once_and_its_pause_answered_at_once(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_age=60), cost_threshold_usd=0.01)
        self.assertIs(br.tool_call("search"), True)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), True)
        self.assertEqual(len(proxy.requests("POST", "/events")), 1)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), False)  # crosses 0.01: paused, said at once
        self.assertEqual((br.paused, br.paused_reason), (True, "budget"))
        self.assertEqual(len(proxy.requests("POST", "/events")), 2)
        self.assertEqual(batches(proxy), [])
        # Paused: nothing more is queued; what was queued before the pause still goes (it happened).
        self.assertIs(br.tool_call("after"), False)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500, buffered=True), False)
        self.assertEqual(br.pending_events, 1)
        self.assertIs(br.flush(), True)
        (batch,) = batches(proxy)
        self.assertEqual([e["tool_name"] for e in batch.body["events"]], ["search"])
        self.assertEqual(types(stored(agent)), {"tool_call": 1, "llm_call": 2})
        self.assertEqual(self.errors, [])

    def test_a_batch_whose_answer_is_lost_is_sent_again_with_the_same_ids_and_counted_once(self) -> None:
        def plan(method: str, path: str, n: int) -> object:
            return "drop" if (method, path, n) == ("POST", "/events/batch", 1) else "forward"

        br, proxy, agent = self.client(plan, buffer=Buffer(max_age=60))
        br.start()
        for _ in range(4):
            br.llm_call("gpt-4o", 1000, 500, buffered=True)
        br.tool_call("search")
        self.assertIs(br.flush(), True)
        first, second = batches(proxy)
        self.assertEqual(first.body, second.body)  # the same batch, the same event ids
        self.assertEqual(len(set(batch_ids(first))), 6)
        self.assertEqual(first.status, 200)  # stored the first time; its answer never arrived
        self.assertTrue(all(r.get("duplicate") is True for r in second.answer["results"]))
        self.assertEqual(listed(agent)["llm_calls"], 4)
        self.assertAlmostEqual(S.api.agent(agent)["total_cost_usd"], 4 * COST, places=9)
        self.assertEqual(sorted(e["event_id"] for e in stored(agent)), sorted(batch_ids(first)))
        self.assertEqual(self.errors, [])

    def test_a_batch_kept_after_its_retries_are_spent_goes_again_with_the_same_ids(self) -> None:
        def plan(method: str, path: str, n: int) -> object:
            return "drop" if (method, path, n) == ("POST", "/events/batch", 1) else "forward"

        br, proxy, agent = self.client(plan, buffer=Buffer(max_age=60), max_retries=0)
        for _ in range(2):
            br.llm_call("gpt-4o", 1000, 500, buffered=True)
        br.tool_call("search")
        self.assertIs(br.flush(), False)  # no answer and no retry left: kept
        self.assertEqual([(e.operation, e.code) for e in self.errors], [("batch", "network_error")])
        self.assertEqual(br.pending_events, 3)
        self.assertIs(br.flush(), True)
        first, second = batches(proxy)
        self.assertEqual(first.body, second.body)
        self.assertEqual(listed(agent)["llm_calls"], 2)
        self.assertEqual(sorted(e["event_id"] for e in stored(agent)), sorted(batch_ids(first)))

    def test_a_5xx_batch_is_retried_by_the_clients_rules(self) -> None:
        from .support import problem

        def plan(method: str, path: str, n: int) -> object:
            return problem(503, "store_unavailable", retry_after=0) if path == "/events/batch" and n <= 2 else "forward"

        br, proxy, agent = self.client(plan, buffer=Buffer(max_age=60))
        br.tool_call("a")
        br.tool_call("b")
        self.assertIs(br.flush(), True)
        self.assertEqual(len(batches(proxy)), 3)
        self.assertEqual(len({tuple(batch_ids(s)) for s in batches(proxy)}), 1)
        self.assertEqual(len(stored(agent)), 2)
        self.assertEqual(self.errors, [])

    def test_a_paused_result_in_a_batch_pauses_the_client(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_age=60), cost_threshold_usd=0.01)
        for _ in range(3):
            self.assertIs(br.llm_call("gpt-4o", 1000, 500, buffered=True), True)  # not waiting: not known yet
        self.assertFalse(br.paused)
        self.assertIs(br.flush(), True)
        (batch,) = batches(proxy)
        self.assertEqual([r["paused"] for r in batch.answer["results"]], [False, True, True])
        self.assertEqual((br.paused, br.paused_reason), (True, "budget"))
        self.assertIs(br.last_response["paused"], True)  # type: ignore[index]
        # Paused: every kind of call says stop, and nothing more leaves the process.
        self.assertIs(br.tool_call("search"), False)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), False)
        self.assertIs(br.end(), False)
        self.assertEqual(br.pending_events, 0)
        self.assertEqual((len(batches(proxy)), len(proxy.requests("POST", "/events"))), (1, 0))
        self.assertTrue(S.api.agent(agent)["is_paused"])
        self.assertEqual(self.errors, [])

    def test_an_invalid_event_is_dropped_with_a_warning_never_retried_and_the_rest_stored(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_age=60), on_error=None)
        br.start()
        self.assertIs(br.send({"event_type": "tool_call"}), True)  # no tool_name: the server refuses it
        br.tool_call("search")
        with self.assertLogs("burnrate", logging.WARNING) as logs:
            self.assertIs(br.flush(), True)
        (batch,) = batches(proxy)
        bad = batch.body["events"][1]["event_id"]
        self.assertEqual(len(logs.records), 1)
        self.assertIn(bad, logs.output[0])
        self.assertIn("invalid_body", logs.output[0])
        self.assertEqual(types(stored(agent)), {"agent_start": 1, "tool_call": 1})
        self.assertIs(br.flush(), True)
        self.assertEqual(len(batches(proxy)), 1)  # not sent again

    def test_an_invalid_event_goes_to_on_error_with_the_servers_problem(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_age=60))
        br.tool_call("search")
        br.send({"event_type": "llm_call"}, buffered=True)  # no model
        self.assertIs(br.flush(), True)
        (err,) = self.errors
        (batch,) = batches(proxy)
        self.assertEqual(
            (err.operation, err.status, err.code, err.retryable, err.event_id),
            ("event", 400, "invalid_body", False, batch.body["events"][1]["event_id"]),
        )
        self.assertEqual(err.problem["errors"][0]["field"], "events.1.model")  # type: ignore[index]
        self.assertEqual(len(stored(agent)), 1)

    def test_events_refused_for_the_keys_budget_stay_queued_and_go_again_after_retry_after(self) -> None:
        assert S.server is not None
        key = S.server.create_key(unique("limited"), rate_limit=3)
        # retry_max_delay above the minute's window: the client waits for the Retry-After it is given.
        br, proxy, agent = self.client(buffer=Buffer(max_age=60), key=key, retry_max_delay=90)
        for i in range(5):
            br.tool_call("t%d" % i)
        started = time.monotonic()
        self.assertIs(br.flush(), True)
        first, second = batches(proxy)
        self.assertEqual([r.get("status", 200) for r in first.answer["results"]], [200, 200, 200, 429, 429])
        retry_after = int(first.headers["retry-after"])
        self.assertGreaterEqual(retry_after, 1)
        self.assertEqual(batch_ids(second), batch_ids(first)[3:])  # the refused ones, the same ids
        self.assertGreaterEqual(second.at - first.at, retry_after - 1)  # the header rounds the window up
        self.assertGreaterEqual(time.monotonic() - started, retry_after - 1)
        self.assertEqual(sorted(e["tool_name"] for e in stored(agent, Api(S.url, key))), ["t%d" % i for i in range(5)])
        self.assertEqual(self.errors, [])  # nothing lost: nothing to report

    def test_burnrate_unreachable_fail_open_goes_on_keeps_the_events_and_close_reports_them(self) -> None:
        errors: List[BurnrateError] = []
        br = Burnrate(base_url=dead_url(), api_key="k", agent_id="a", on_error=errors.append, max_retries=1,
                      retry_base_delay=0.01, buffer=Buffer(max_age=60))
        self.assertIs(br.tool_call("a"), True)
        self.assertIs(br.flush(), False)
        self.assertEqual([(e.operation, e.code, e.attempts) for e in errors], [("batch", "network_error", 2)])
        self.assertIn("1 events kept to send again", str(errors[0]))
        self.assertIs(br.tool_call("b"), True)  # open: the agent goes on
        self.assertEqual(br.pending_events, 2)
        self.assertIs(br.close(timeout=1), False)
        self.assertEqual(errors[-1].code, "not_sent")
        self.assertIn("2 buffered events", str(errors[-1]))
        self.assertEqual(br.pending_events, 0)

    def test_burnrate_unreachable_fail_closed_stops_once_a_batch_failed(self) -> None:
        errors: List[BurnrateError] = []
        br = Burnrate(base_url=dead_url(), api_key="k", agent_id="a", on_error=errors.append, max_retries=0,
                      fail_mode="closed", buffer=Buffer(max_age=60))
        self.addCleanup(br.close, 1)
        self.assertIs(br.start(), True)  # nothing known yet: not waiting for the network
        self.assertIs(br.flush(), False)
        self.assertIs(br.tool_call("a"), False)
        self.assertIs(br.end(), False)
        self.assertFalse(br.paused)  # not paused by burnrate

    def test_past_its_bound_the_buffer_drops_new_events_and_reports_once(self) -> None:
        errors: List[BurnrateError] = []
        br = Burnrate(base_url=dead_url(), api_key="k", agent_id="a", on_error=errors.append, max_retries=0,
                      buffer=Buffer(max_events=3, max_queued=3, max_age=60))
        for name in ("a", "b", "c"):
            self.assertIs(br.tool_call(name), True)
        self.assertIs(br.tool_call("d"), True)  # dropped; fail-open goes on
        self.assertIs(br.tool_call("e"), True)
        self.assertEqual(br.pending_events, 3)
        full = [e for e in errors if e.code == "buffer_full"]
        self.assertEqual(len(full), 1)
        self.assertEqual(full[0].operation, "event")
        closed = Burnrate(base_url=dead_url(), api_key="k", agent_id="a", on_error=errors.append, max_retries=0,
                          fail_mode="closed", buffer=Buffer(max_events=1, max_queued=1, max_age=60))
        self.assertIs(closed.tool_call("a"), True)  # nothing known yet
        self.assertIs(closed.tool_call("b"), False)  # dropped (its flush to a dead burnrate holds "a"): fail-closed stops
        for client in (br, closed):
            client.close(timeout=1)

    def test_a_guarded_call_is_reported_at_once_with_the_buffer_on(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_age=60), cost_threshold_usd=1.0)
        br.tool_call("before")
        with br.guard(model="gpt-4o", input_tokens=1000, max_output_tokens=1000) as guard:
            self.assertIs(guard.allowed, True)
            self.assertIs(guard.llm_call(1000, 500), True)
            self.assertIs(guard.reported, True)
            with self.assertRaises(TypeError):
                guard.llm_call(1000, 500, buffered=True)
        (event,) = proxy.requests("POST", "/events")
        self.assertEqual(event.body["hold_id"], guard.hold_id)
        self.assertEqual(batches(proxy), [])
        self.assertEqual(S.api.agent(agent)["held_usd"], 0)
        self.assertEqual(br.pending_events, 1)
        self.assertEqual(self.errors, [])

    def test_after_close_events_go_out_one_by_one(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_age=60))
        br.tool_call("queued")
        self.assertIs(br.close(), True)
        self.assertEqual(len(batches(proxy)), 1)
        self.assertIs(br.tool_call("alone"), True)
        self.assertEqual([s.body["tool_name"] for s in proxy.requests("POST", "/events")], ["alone"])
        self.assertEqual(len(stored(agent)), 2)

    def test_the_context_manager_flushes_on_exit(self) -> None:
        proxy = Proxy(S.url, forward)
        self.addCleanup(proxy.close)
        agent = unique("with")
        with Burnrate(base_url=proxy.url, api_key=S.key, agent_id=agent, buffer=Buffer(max_age=60)) as br:
            br.start()
            br.tool_call("search")
            self.assertEqual(batches(proxy), [])
        self.assertEqual(len(batches(proxy)), 1)
        self.assertEqual(len(stored(agent)), 2)

    def test_without_a_buffer_nothing_changes(self) -> None:
        br, proxy, _ = self.client(buffer=None)
        self.assertIsNone(br.buffer)
        self.assertIs(br.tool_call("a"), True)
        self.assertIs(br.llm_call("gpt-4o", 10, 10, buffered=True), True)  # sent at once
        self.assertEqual(len(proxy.requests("POST", "/events")), 2)
        self.assertEqual((br.flush(), br.close(), br.pending_events), (True, True, 0))
        self.assertEqual(batches(proxy), [])

    def test_invalid_buffer_options_raise_value_error(self) -> None:
        for bad in (dict(max_events=0), dict(max_events=1001), dict(max_age=0), dict(max_age=float("inf")),
                    dict(max_queued=5, max_events=10), dict(max_events=2.5), dict(exit_timeout=-1)):
            with self.subTest(**{k: repr(v) for k, v in bad.items()}), self.assertRaises(ValueError):
                Buffer(**bad)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            Burnrate(base_url="http://127.0.0.1:9", api_key="k", agent_id="a", buffer="yes")  # type: ignore[arg-type]
        br = Burnrate(base_url="http://127.0.0.1:9", api_key="k", agent_id="a", buffer=True)
        self.assertEqual(br.buffer, Buffer(max_events=100, max_age=1.0, max_queued=10_000, exit_timeout=5.0))
        with self.assertRaises(TypeError):
            br.send("tool_call", buffered=True)  # type: ignore[arg-type]
        br.close()


THREADS, PER_THREAD = 8, 50


class BufferThreadTest(unittest.TestCase):
    def test_several_threads_buffering_at_once_lose_nothing_and_count_nothing_twice(self) -> None:
        # Two of the batches lose their answer: sent again, they must count nothing twice.
        def plan(method: str, path: str, n: int) -> object:
            return "drop" if path == "/events/batch" and n in (2, 5) else "forward"

        proxy = Proxy(S.url, plan)
        self.addCleanup(proxy.close)
        errors: List[BurnrateError] = []
        agent = unique("bufthreads")
        br = Burnrate(base_url=proxy.url, api_key=S.key, agent_id=agent, on_error=errors.append,
                      retry_base_delay=0.02, buffer=Buffer(max_events=20, max_age=0.05))
        results: List[bool] = []
        lock = threading.Lock()
        barrier = threading.Barrier(THREADS)

        def work(t: int) -> None:
            barrier.wait(10)
            for i in range(PER_THREAD):
                ok = br.tool_call("t%d" % t) if i % 2 else br.llm_call("gpt-4o", 1000, 500, buffered=True)
                with lock:
                    results.append(ok)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertFalse(any(t.is_alive() for t in threads))
        self.assertIs(br.close(), True)

        total = THREADS * PER_THREAD
        self.assertEqual(results, [True] * total)
        self.assertEqual(errors, [])
        self.assertEqual(proxy.requests("POST", "/events"), [])
        sent: Set[str] = set()
        for s in batches(proxy):
            sent.update(batch_ids(s))
        self.assertEqual(len(sent), total)
        self.assertLess(len(batches(proxy)), total // 4)  # batches, not a request per event
        events = stored(agent)
        self.assertEqual(len(events), total)
        self.assertEqual({e["event_id"] for e in events}, sent)
        self.assertEqual(listed(agent)["llm_calls"], total // 2)
        self.assertAlmostEqual(S.api.agent(agent)["total_cost_usd"], total // 2 * COST, places=6)


async def until(predicate: Any, timeout: float = 10.0) -> bool:
    """wait_for on the event loop: the client's flusher task runs while this waits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return bool(predicate())


class AsyncBufferTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self.errors: List[BurnrateError] = []

    def client(self, plan: Plan = forward, buffer: Any = True, key: str = "", **kwargs: Any) -> Tuple[AsyncBurnrate, Proxy, str]:
        proxy = Proxy(S.url, plan)
        self.addCleanup(proxy.close)
        agent = unique("abuf")
        options: Dict[str, Any] = dict(
            base_url=proxy.url, api_key=key or S.key, agent_id=agent, on_error=self.errors.append,
            retry_base_delay=0.02, retry_max_delay=2.0, buffer=buffer,
        )
        options.update(kwargs)
        br = AsyncBurnrate(**options)
        self.addAsyncCleanup(br.close, 10)
        return br, proxy, agent

    async def test_batches_by_size_by_age_and_on_end_from_a_task_on_the_loop(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_events=5, max_age=0.3))
        self.assertIs(await br.start(), True)
        for i in range(4):
            self.assertIs(await br.tool_call("t%d" % i), True)
        self.assertEqual((batches(proxy), br.pending_events), ([], 5))  # queued, no request made yet
        # Sent by a task on this loop: no flusher thread of its own, even while events wait.
        self.assertEqual([t.name for t in threading.enumerate() if t.name == "burnrate-flusher:" + agent], [])
        self.assertTrue(await until(lambda: len(batches(proxy)) == 1 and br.pending_events == 0))  # by size
        queued_at = time.monotonic()
        await br.tool_call("late")
        await br.llm_call("gpt-4o", 1000, 500, buffered=True)
        self.assertTrue(await until(lambda: len(batches(proxy)) == 2 and br.pending_events == 0))  # by age
        self.assertGreaterEqual(batches(proxy)[1].at - queued_at, 0.3)
        await br.tool_call("last")
        self.assertIs(await br.end(), True)  # queued, flushed, answered
        self.assertEqual([len(s.body["events"]) for s in batches(proxy)], [5, 2, 2])
        self.assertEqual(batches(proxy)[2].body["events"][-1]["event_type"], "agent_end")
        self.assertEqual(proxy.requests("POST", "/events"), [])
        events = await asyncio.to_thread(stored, agent)
        self.assertEqual(types(events), {"agent_start": 1, "tool_call": 6, "llm_call": 1, "agent_end": 1})
        self.assertEqual((await asyncio.to_thread(listed, agent))["llm_calls"], 1)
        self.assertEqual(self.errors, [])

    async def test_an_llm_call_without_the_flag_answers_its_pause_at_once(self) -> None:
        br, proxy, _ = self.client(buffer=Buffer(max_age=60), cost_threshold_usd=0.01)
        self.assertIs(await br.tool_call("search"), True)
        self.assertIs(await br.llm_call("gpt-4o", 1000, 500), True)
        self.assertIs(await br.from_openai_chat("gpt-4o", {"prompt_tokens": 1000, "completion_tokens": 500}), False)
        self.assertTrue(br.paused)
        self.assertEqual((len(proxy.requests("POST", "/events")), len(batches(proxy))), (2, 0))
        self.assertIs(await br.flush(), True)  # the tool call queued before the pause
        self.assertEqual(len(batches(proxy)), 1)
        self.assertEqual(self.errors, [])

    async def test_a_paused_result_in_a_batch_pauses_the_client(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_age=60), cost_threshold_usd=0.01)
        for _ in range(2):
            self.assertIs(await br.llm_call("gpt-4o", 1000, 500, buffered=True), True)
        self.assertIs(await br.flush(), True)
        self.assertEqual((br.paused, br.paused_reason), (True, "budget"))
        self.assertIs(await br.tool_call("search"), False)
        self.assertIs(await br.llm_call("gpt-4o", 1000, 500), False)
        self.assertIs(await br.end(), False)
        self.assertEqual((len(batches(proxy)), len(proxy.requests("POST", "/events")), br.pending_events), (1, 0, 0))
        self.assertEqual(self.errors, [])

    async def test_a_batch_whose_answer_is_lost_is_sent_again_and_counted_once(self) -> None:
        def plan(method: str, path: str, n: int) -> object:
            return "drop" if (method, path, n) == ("POST", "/events/batch", 1) else "forward"

        br, proxy, agent = self.client(plan, buffer=Buffer(max_age=60))
        for _ in range(3):
            await br.llm_call("gpt-4o", 1000, 500, buffered=True)
        await br.tool_call("search")
        self.assertIs(await br.flush(), True)
        first, second = batches(proxy)
        self.assertEqual(first.body, second.body)
        self.assertEqual((await asyncio.to_thread(listed, agent))["llm_calls"], 3)
        self.assertEqual(sorted(e["event_id"] for e in await asyncio.to_thread(stored, agent)), sorted(batch_ids(first)))
        self.assertEqual(self.errors, [])

    async def test_events_refused_for_the_keys_budget_go_again_after_retry_after_from_the_task(self) -> None:
        assert S.server is not None
        key = await asyncio.to_thread(S.server.create_key, unique("alimited"), 3)
        br, proxy, agent = self.client(buffer=Buffer(max_events=5, max_age=60), key=key, retry_max_delay=90)
        for i in range(5):
            await br.tool_call("t%d" % i)  # the fifth fills the buffer: the task sends it
        self.assertTrue(await until(lambda: len(batches(proxy)) == 1 and batches(proxy)[0].answer is not None))
        first = batches(proxy)[0]
        self.assertEqual([r.get("status", 200) for r in first.answer["results"]], [200, 200, 200, 429, 429])
        retry_after = int(first.headers["retry-after"])
        self.assertTrue(await until(lambda: len(batches(proxy)) == 2 and br.pending_events == 0, timeout=retry_after + 30))
        second = batches(proxy)[1]
        self.assertEqual(batch_ids(second), batch_ids(first)[3:])
        self.assertGreaterEqual(second.at - first.at, retry_after - 1)
        self.assertEqual(len(await asyncio.to_thread(stored, agent, Api(S.url, key))), 5)
        self.assertEqual(self.errors, [])

    async def test_an_invalid_event_is_dropped_and_reported_and_the_rest_stored(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_age=60))
        await br.start()
        self.assertIs(await br.send({"event_type": "tool_call", "tool_name": ""}), True)  # empty: refused
        await br.tool_call("search")
        self.assertIs(await br.flush(), True)
        (err,) = self.errors
        self.assertEqual((err.operation, err.status, err.code), ("event", 400, "invalid_body"))
        self.assertEqual(types(await asyncio.to_thread(stored, agent)), {"agent_start": 1, "tool_call": 1})
        self.assertEqual(len(batches(proxy)), 1)

    async def test_concurrent_coroutines_lose_nothing_and_count_nothing_twice(self) -> None:
        def plan(method: str, path: str, n: int) -> object:
            return "drop" if path == "/events/batch" and n == 2 else "forward"

        br, proxy, agent = self.client(plan, buffer=Buffer(max_events=25, max_age=0.05))

        async def work(i: int) -> bool:
            await asyncio.sleep(0)
            if i % 2:
                return await br.tool_call("t%d" % i)
            return await br.llm_call("gpt-4o", 1000, 500, buffered=True)

        results = await asyncio.wait_for(asyncio.gather(*(work(i) for i in range(200))), 60)
        self.assertEqual(results, [True] * 200)
        self.assertIs(await br.close(), True)
        sent = {i for s in batches(proxy) for i in batch_ids(s)}
        self.assertEqual(len(sent), 200)
        self.assertLess(len(batches(proxy)), 50)
        self.assertEqual({e["event_id"] for e in await asyncio.to_thread(stored, agent)}, sent)
        self.assertEqual((await asyncio.to_thread(listed, agent))["llm_calls"], 100)
        self.assertEqual(self.errors, [])

    async def test_async_with_closes_and_flushes(self) -> None:
        proxy = Proxy(S.url, forward)
        self.addCleanup(proxy.close)
        agent = unique("awith")
        async with AsyncBurnrate(base_url=proxy.url, api_key=S.key, agent_id=agent, buffer=Buffer(max_age=60)) as br:
            await br.start()
            await br.tool_call("search")
        self.assertEqual(len(batches(proxy)), 1)
        self.assertEqual(br.pending_events, 0)
        self.assertEqual(len(await asyncio.to_thread(stored, agent)), 2)

    async def test_the_sync_side_used_from_a_thread_is_flushed_too(self) -> None:
        br, proxy, agent = self.client(buffer=Buffer(max_age=0.2))
        await br.configure()
        await asyncio.to_thread(br.sync.tool_call, "from-a-thread")
        self.assertTrue(await until(lambda: len(batches(proxy)) == 1 and br.pending_events == 0))
        self.assertEqual(len(await asyncio.to_thread(stored, agent)), 1)


EXIT_SCRIPT = textwrap.dedent(
    """
    import sys
    from burnrate import Buffer, Burnrate
    url, key, agent, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    br = Burnrate(base_url=url, api_key=key, agent_id=agent, max_retries=0,
                  buffer=Buffer(max_age=60, exit_timeout=timeout))
    br.start()
    for i in range(3):
        br.tool_call("t%d" % i)
    print("queued", br.pending_events, flush=True)
    # exits without flush() or close()
    """
)


class ExitTest(unittest.TestCase):
    def run_script(self, url: str, agent: str, timeout: float) -> Tuple[subprocess.CompletedProcess, float]:  # type: ignore[type-arg]
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", EXIT_SCRIPT, url, S.key, agent, str(timeout)],
            capture_output=True, text=True, timeout=60, env=dict(os.environ), check=False,
        )
        return done, time.monotonic() - started

    def test_the_interpreters_exit_flushes_the_buffer(self) -> None:
        agent = unique("atexit")
        done, _ = self.run_script(S.url, agent, 5.0)
        self.assertEqual((done.returncode, done.stdout.strip()), (0, "queued 4"), done.stderr)
        self.assertEqual(types(stored(agent)), {"agent_start": 1, "tool_call": 3})

    def test_an_unreachable_burnrate_delays_the_exit_by_exit_timeout_at_most(self) -> None:
        done, took = self.run_script(dead_url(), unique("atexit-dead"), 1.0)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertLess(took, 15)
        self.assertIn("4 buffered events were not sent before the interpreter's exit", done.stderr)

    def test_no_exit_flush_with_exit_timeout_zero(self) -> None:
        agent = unique("atexit-off")
        done, _ = self.run_script(S.url, agent, 0.0)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(S.api.agent_status(agent), 404)


if __name__ == "__main__":
    unittest.main()

"""Runs: the run id start() makes and every event carries until end(), sync, buffered and
async, read back from a real burnrate with GET /runs/{run_id} and GET /agents/{agent_id}."""

from __future__ import annotations

import asyncio
import re
import unittest
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple

from burnrate import AsyncBurnrate, Buffer, Burnrate, BurnrateError

from .support import ModuleServer, Proxy, Seen, unique

S = ModuleServer()

UUID_V4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
# Long enough that no batch leaves by age while a test looks.
NEVER = 600.0


def setUpModule() -> None:
    S.start("py-runs")


def tearDownModule() -> None:
    S.stop()


def forward(method: str, path: str, n: int) -> object:
    return "forward"


def stored(agent: str) -> List[Tuple[str, Optional[str]]]:
    """The agent's events as burnrate stores them, oldest first: (tool name or type, run_id)."""
    S.api.drained()
    status, body = S.api.call("GET", "/agents/%s?limit=1000" % urllib.parse.quote(agent, safe=""))
    if status != 200:
        raise AssertionError("GET /agents/%s: %d %r" % (agent, status, body))
    return [(e["tool_name"] or e["event_type"], e["run_id"]) for e in reversed(body["events"])]


def run(run_id: str) -> Dict[str, Any]:
    S.api.drained()
    status, body = S.api.call("GET", "/runs/%s?limit=1000" % urllib.parse.quote(run_id, safe=""))
    if status != 200:
        raise AssertionError("GET /runs/%s: %d %r" % (run_id, status, body))
    return body  # type: ignore[no-any-return]


def runs_of(agent: str) -> List[Tuple[str, str]]:
    status, body = S.api.call("GET", "/agents/%s/runs" % urllib.parse.quote(agent, safe=""))
    if status != 200:
        raise AssertionError("GET /agents/%s/runs: %d %r" % (agent, status, body))
    return [(r["run_id"], r["status"]) for r in body["runs"]]


def wire(seen: List[Seen]) -> List[Tuple[str, Optional[str]]]:
    """The events the proxy saw, in the order they left: (tool name or type, run_id)."""
    events: List[Dict[str, Any]] = []
    for s in seen:
        path = s.path.split("?")[0]
        if s.method == "POST" and path == "/events/batch":
            events.extend(s.body["events"])
        elif s.method == "POST" and path == "/events":
            events.append(s.body)
    return [(e.get("tool_name") or e["event_type"], e.get("run_id")) for e in events]


class RunIdsTest(unittest.TestCase):
    def setUp(self) -> None:
        self.errors: List[BurnrateError] = []

    def client(self, agent: str, **kwargs: Any) -> Burnrate:
        options: Dict[str, Any] = dict(base_url=S.url, api_key=S.key, agent_id=agent, on_error=self.errors.append, retry_base_delay=0.01)
        options.update(kwargs)
        br = Burnrate(**options)
        self.addCleanup(br.close)
        return br

    def test_start_makes_a_run_id_that_every_event_carries_until_end(self) -> None:
        agent = unique("py-run")
        proxy = Proxy(S.url, forward)
        self.addCleanup(proxy.close)
        br = self.client(agent, base_url=proxy.url)
        self.assertIsNone(br.run_id)
        self.assertIs(br.tool_call("before"), True)

        self.assertIs(br.start({"task": 1}), True)
        first = br.run_id
        assert first is not None
        self.assertRegex(first, UUID_V4)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), True)
        self.assertIs(br.tool_call("search"), True)
        self.assertIs(br.from_openai_chat("gpt-4o", {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}), True)
        self.assertIs(br.send({"event_type": "tool_call", "tool_name": "raw"}), True)
        with br.guard(model="gpt-4o", input_tokens=1000, max_output_tokens=1000) as guard:
            self.assertTrue(guard.allowed)
            self.assertEqual(guard.run_id, first)
            self.assertIs(guard.llm_call(1000, 500), True)
        self.assertEqual(br.run_id, first)
        self.assertIs(br.end(), True)
        self.assertIsNone(br.run_id)
        self.assertIs(br.tool_call("between"), True)

        self.assertIs(br.start(), True)
        second = br.run_id
        assert second is not None
        self.assertRegex(second, UUID_V4)
        self.assertNotEqual(second, first)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), True)
        self.assertIs(br.end(), True)

        self.assertEqual(
            stored(agent),
            [
                ("before", None),
                ("agent_start", first),
                ("llm_call", first),
                ("search", first),
                ("llm_call", first),
                ("raw", first),
                ("llm_call", first),
                ("agent_end", first),
                ("between", None),
                ("agent_start", second),
                ("llm_call", second),
                ("agent_end", second),
            ],
        )
        # The guard's hold and its report, which settled it, named the run.
        self.assertEqual([(s.body["run_id"], s.status) for s in proxy.requests("POST", "/holds")], [(first, 200)])
        reports = [s.body for s in proxy.requests("POST", "/events") if "hold_id" in s.body]
        self.assertEqual([r["run_id"] for r in reports], [first])
        self.assertEqual(
            {k: run(first)[k] for k in ("run_id", "agent_ids", "status", "llm_calls", "tool_calls", "event_count")},
            {"run_id": first, "agent_ids": [agent], "status": "ended", "llm_calls": 3, "tool_calls": 2, "event_count": 7},
        )
        self.assertEqual((run(second)["status"], run(second)["event_count"]), ("ended", 3))
        self.assertEqual(runs_of(agent), [(second, "ended"), (first, "ended")])
        self.assertEqual(self.errors, [])

    def test_buffered_events_keep_the_run_they_were_queued_in(self) -> None:
        agent = unique("py-run-buffered")
        proxy = Proxy(S.url, forward)
        self.addCleanup(proxy.close)
        br = self.client(agent, base_url=proxy.url, buffer=Buffer(max_age=NEVER))
        br.tool_call("before")
        br.start()
        first = br.run_id
        br.tool_call("search")
        br.llm_call("gpt-4o", 1000, 500, buffered=True)
        # Sent at once, ahead of the queued events: the same run.
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), True)
        # A start() without end(): a new run; the events queued before it keep theirs.
        br.start()
        second = br.run_id
        self.assertNotEqual(second, first)
        br.tool_call("fetch")
        self.assertEqual(proxy.requests("POST", "/events/batch"), [])
        self.assertIs(br.end(), True)
        self.assertIsNone(br.run_id)
        br.tool_call("after")
        self.assertIs(br.flush(), True)

        self.assertEqual(
            wire(proxy.seen),
            [
                ("llm_call", first),
                ("before", None),
                ("agent_start", first),
                ("search", first),
                ("llm_call", first),
                ("agent_start", second),
                ("fetch", second),
                ("agent_end", second),
                ("after", None),
            ],
        )
        assert first is not None and second is not None
        one = run(first)
        self.assertEqual((one["status"], one["llm_calls"], one["tool_calls"], one["event_count"]), ("open", 2, 1, 4))
        two = run(second)
        self.assertEqual((two["status"], two["tool_calls"], two["event_count"]), ("ended", 1, 3))
        self.assertEqual(self.errors, [])

    def test_a_given_run_id_an_event_with_its_own_and_invalid_ones(self) -> None:
        agent = unique("py-run-given")
        br = self.client(agent)
        mine, other = unique("nightly"), unique("handed-over")
        self.assertIs(br.start({"task": "nightly"}, run_id=mine), True)
        self.assertEqual(br.run_id, mine)
        self.assertIs(br.tool_call("own", run_id=other), True)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500, run_id=other), True)
        self.assertIs(br.send({"event_type": "tool_call", "tool_name": "raw", "run_id": other}), True)
        self.assertIs(br.send({"event_type": "tool_call", "tool_name": "none", "run_id": None}), True)  # None: the current run

        for bad in ("", "x" * 129, "tab\there", 42):
            with self.assertRaises(ValueError):
                br.start(run_id=bad)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            br.tool_call("bad", run_id="")
        self.assertEqual(br.run_id, mine)  # nothing began
        self.assertIs(br.end(), True)

        self.assertEqual(
            stored(agent),
            [("agent_start", mine), ("own", other), ("llm_call", other), ("raw", other), ("none", mine), ("agent_end", mine)],
        )
        self.assertEqual(self.errors, [])


def set_run_budget(agent: str, usd: Optional[float]) -> None:
    status, body = S.api.call("POST", "/config", {"agent_id": agent, "run_budget_usd": usd})
    if status != 200:
        raise AssertionError("POST /config: %d %r" % (status, body))


def routes(proxy: Proxy, since: int = 0) -> List[str]:
    return ["%s %s" % (s.method, s.path.split("?")[0]) for s in proxy.seen[since:]]


# A gpt-4o call: 1000 in / 500 out = 0.0075 USD; a guard's worst case, 1000 in / 1000 out = 0.0125.
WORST = dict(model="gpt-4o", input_tokens=1000, max_output_tokens=1000)


class RunBudgetTest(unittest.TestCase):
    def setUp(self) -> None:
        self.errors: List[BurnrateError] = []

    def client(self, agent: str, **kwargs: Any) -> Burnrate:
        options: Dict[str, Any] = dict(base_url=S.url, api_key=S.key, agent_id=agent, on_error=self.errors.append, retry_base_delay=0.01)
        options.update(kwargs)
        br = Burnrate(**options)
        self.addCleanup(br.close)
        return br

    def test_the_call_over_the_run_budget_stops_the_run_not_the_agent_until_end(self) -> None:
        agent = unique("py-run-budget")
        proxy = Proxy(S.url, forward)
        self.addCleanup(proxy.close)
        # 0.02 a run: the third 0.0075 call takes it over.
        br = self.client(agent, base_url=proxy.url, run_budget_usd=0.02)
        other = self.client(agent)  # a second process of the same agent, in a run of its own
        self.assertIs(br.start(), True)
        self.assertIs(other.start(), True)
        first = br.run_id
        assert first is not None
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), True)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), True)
        self.assertEqual((br.run_stopped, br.run_stopped_reason), (False, None))
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), False)
        last = br.last_response or {}
        self.assertEqual((last["paused"], last["paused_reason"]), (True, "run_budget"))
        self.assertEqual((br.run_stopped, br.run_stopped_reason, br.run_id), (True, "run_budget", first))
        # The agent is not paused: its pause state says nothing of the run.
        self.assertEqual((br.paused, br.paused_reason), (False, None))

        # Nothing more of the run is sent.
        sent = len(proxy.seen)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), False)
        self.assertIs(br.tool_call("search"), False)
        self.assertIs(br.send({"event_type": "tool_call", "tool_name": "raw"}), False)
        self.assertIs(br.from_openai_chat("gpt-4o", {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}), False)
        with br.guard(**WORST) as guard:  # type: ignore[arg-type]
            self.assertEqual((guard.allowed, guard.reason, guard.paused_reason, guard.hold_id), (False, "run_budget", "run_budget", None))
        self.assertEqual(len(proxy.seen), sent)
        # The agent-level pause logic does not see it, nor clear it.
        self.assertIs(br.refresh(), False)
        self.assertIs(br.wait_until_resumed(poll_interval=0.01, timeout=1), True)
        self.assertEqual((br.paused, br.run_stopped), (False, True))
        self.assertEqual((S.api.agent(agent)["is_paused"], S.api.agent(agent)["paused_reason"]), (False, None))

        # The agent's other run goes on.
        self.assertIs(other.llm_call("gpt-4o", 1000, 500), True)
        self.assertEqual(((other.last_response or {})["paused"], other.run_stopped), (False, False))

        # end() still closes the run, and clears the stop.
        self.assertIs(br.end(), True)
        self.assertEqual(routes(proxy, sent), ["GET /agents/" + agent] * 2 + ["POST /events"])
        self.assertEqual((proxy.seen[-1].body["event_type"], proxy.seen[-1].body["run_id"]), ("agent_end", first))
        self.assertEqual((br.run_stopped, br.run_stopped_reason, br.run_id), (False, None, None))
        self.assertEqual(
            [e for e in stored(agent) if e[1] == first],
            [("agent_start", first), ("llm_call", first), ("llm_call", first), ("llm_call", first), ("agent_end", first)],
        )
        one = run(first)
        self.assertEqual((one["status"], one["llm_calls"], one["cost_usd"]), ("ended", 3, 0.0225))

        # The next run runs, and is metered against a budget of its own.
        self.assertIs(br.start(), True)
        second = br.run_id
        assert second is not None
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), True)
        self.assertIs(br.tool_call("search"), True)
        self.assertIs(br.end(), True)
        two = run(second)
        self.assertEqual((two["status"], two["llm_calls"], two["tool_calls"], two["cost_usd"]), ("ended", 1, 1, 0.0075))
        self.assertIs(other.end(), True)
        self.assertEqual(self.errors, [])

    def test_buffered_a_run_budget_answer_stops_the_run_one_about_an_older_run_nothing(self) -> None:
        agent = unique("py-run-budget-buffered")
        set_run_budget(agent, 0.01)
        proxy = Proxy(S.url, forward)
        self.addCleanup(proxy.close)
        br = self.client(agent, base_url=proxy.url, buffer=Buffer(max_age=NEVER))
        br.start()
        first = br.run_id
        self.assertIs(br.llm_call("gpt-4o", 1000, 500, buffered=True), True)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500, buffered=True), True)  # queued: not known yet
        self.assertIs(br.flush(), True)
        batch = proxy.requests("POST", "/events/batch")[0]
        self.assertEqual([r["paused_reason"] for r in batch.answer["results"]], [None, None, "run_budget"])
        self.assertEqual((br.run_stopped, br.run_stopped_reason, br.paused), (True, "run_budget", False))
        # The run's calls return False, queued or not, and nothing is queued.
        self.assertIs(br.tool_call("search"), False)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500, buffered=True), False)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), False)
        self.assertEqual(br.pending_events, 0)
        self.assertIs(br.end(), True)
        self.assertIs(br.run_stopped, False)
        self.assertEqual(sorted(stored(agent)), sorted([("agent_start", first), ("llm_call", first), ("llm_call", first), ("agent_end", first)]))

        # Events of a run that left after the next start(): their answer stops nothing now.
        br.start()
        old = br.run_id
        br.llm_call("gpt-4o", 1000, 500, buffered=True)
        br.llm_call("gpt-4o", 1000, 500, buffered=True)
        br.start()
        current = br.run_id
        self.assertIs(br.flush(), True)
        late = proxy.requests("POST", "/events/batch")[-1]
        self.assertEqual([e["run_id"] for e in late.body["events"]], [old, old, old, current])
        self.assertEqual([r["paused_reason"] for r in late.answer["results"]], [None, None, "run_budget", None])
        self.assertEqual((br.run_stopped, br.run_id), (False, current))
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), True)
        self.assertIs(br.end(), True)
        assert old is not None and current is not None
        self.assertEqual((run(old)["llm_calls"], run(old)["status"]), (2, "open"))
        self.assertEqual((run(current)["llm_calls"], run(current)["status"]), (1, "ended"))
        self.assertEqual(self.errors, [])

    def test_guard_refused_for_the_run_budget_and_a_run_stopped_elsewhere(self) -> None:
        agent = unique("py-run-budget-guard")
        set_run_budget(agent, 0.015)
        proxy = Proxy(S.url, forward)
        self.addCleanup(proxy.close)
        br = self.client(agent, base_url=proxy.url)
        shared = unique("shared")
        br.start(run_id=shared)
        # 0.0125 held, 0.0075 reported: the hold settled.
        with br.guard(**WORST) as guard:  # type: ignore[arg-type]
            self.assertTrue(guard.allowed)
            self.assertIs(guard.llm_call(1000, 500), True)
        # 0.0075 spent and 0.0125 held would be 0.02: over the run's 0.015.
        with br.guard(**WORST) as guard:  # type: ignore[arg-type]
            self.assertEqual((guard.allowed, guard.reason, guard.paused_reason, guard.worst_case_usd), (False, "run_budget", None, 0.0125))
        self.assertEqual((br.run_stopped, br.paused), (False, False))  # a smaller call may fit
        self.assertEqual([s.body["run_id"] for s in proxy.requests("POST", "/holds")], [shared, shared])

        # Another process of the agent takes the same run over its budget.
        helper = self.client(agent)
        self.assertIs(helper.llm_call("gpt-4o", 1000, 500, run_id=shared), True)  # 0.015: not over
        self.assertIs(helper.llm_call("gpt-4o", 1000, 500, run_id=shared), True)  # over, but not the helper's run
        self.assertEqual(((helper.last_response or {})["paused_reason"], helper.run_stopped), ("run_budget", False))
        # This client learns of it from the hold's refusal.
        with br.guard(**WORST) as guard:  # type: ignore[arg-type]
            self.assertEqual((guard.allowed, guard.reason, guard.paused_reason), (False, "run_budget", "run_budget"))
        self.assertEqual((br.run_stopped, br.run_stopped_reason, br.paused), (True, "run_budget", False))
        sent = len(proxy.seen)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), False)
        self.assertIsNone(br.guarded(**WORST)(lambda guard: self.fail("ran"))())  # type: ignore[arg-type]
        self.assertEqual(len(proxy.seen), sent)
        self.assertIs(br.end(), True)
        br.start()
        with br.guard(**WORST) as guard:  # type: ignore[arg-type]
            self.assertTrue(guard.allowed)
            self.assertIs(guard.llm_call(1000, 500), True)
        self.assertEqual(self.errors, [])

    def test_run_budget_usd_goes_with_the_config_and_an_invalid_one_raises(self) -> None:
        agent = unique("py-run-budget-config")
        proxy = Proxy(S.url, forward)
        self.addCleanup(proxy.close)
        self.client(agent, base_url=proxy.url, run_budget_usd=2.5, cost_threshold_usd=10)
        self.assertEqual(proxy.seen[0].body, {"agent_id": agent, "cost_threshold_usd": 10.0, "run_budget_usd": 2.5})
        self.assertEqual(S.api.agent(agent)["config"]["run_budget_usd"], 2.5)
        for bad in (0, -1, 1_000_001, float("nan"), "1", True):
            with self.assertRaises(ValueError):
                Burnrate(base_url=S.url, api_key=S.key, agent_id=agent, run_budget_usd=bad)  # type: ignore[arg-type]


class AsyncRunIdsTest(unittest.IsolatedAsyncioTestCase):
    async def test_async_runs_unbuffered_and_buffered(self) -> None:
        errors: List[BurnrateError] = []
        agent = unique("py-run-async")
        proxy = Proxy(S.url, forward)
        self.addCleanup(proxy.close)
        br = AsyncBurnrate(base_url=proxy.url, api_key=S.key, agent_id=agent, on_error=errors.append, retry_base_delay=0.01)
        self.assertIsNone(br.run_id)
        self.assertIs(await br.tool_call("before"), True)
        self.assertIs(await br.start(), True)
        first = br.run_id
        assert first is not None
        self.assertRegex(first, UUID_V4)
        self.assertIs(await br.llm_call("gpt-4o", 1000, 500), True)
        async with br.guard(model="gpt-4o", input_tokens=1000, max_output_tokens=1000) as guard:
            self.assertTrue(guard.allowed)
            self.assertIs(await guard.llm_call(1000, 500), True)
        self.assertIs(await br.end(), True)
        self.assertIsNone(br.run_id)

        buffered = AsyncBurnrate(
            base_url=proxy.url, api_key=S.key, agent_id=agent, on_error=errors.append, retry_base_delay=0.01, buffer=Buffer(max_age=NEVER)
        )
        async with buffered:
            await buffered.start(run_id="async-" + first)
            await buffered.tool_call("search")
            await buffered.llm_call("gpt-4o", 1000, 500, buffered=True)
            self.assertIs(await buffered.end(), True)
            await buffered.tool_call("after")

        events = await asyncio.to_thread(stored, agent)
        self.assertEqual(
            events[:5],
            [("before", None), ("agent_start", first), ("llm_call", first), ("llm_call", first), ("agent_end", first)],
        )
        # One batch's events share their arrival time: their stored order is not theirs.
        own = "async-" + first
        self.assertEqual(sorted(events[5:9]), sorted([("agent_start", own), ("search", own), ("llm_call", own), ("agent_end", own)]))
        self.assertEqual(events[9:], [("after", None)])
        second = await asyncio.to_thread(run, "async-" + first)
        self.assertEqual((second["status"], second["event_count"]), ("ended", 4))
        self.assertEqual(errors, [])

    async def test_async_a_run_over_its_budget_stops_until_end(self) -> None:
        errors: List[BurnrateError] = []
        agent = unique("py-run-budget-async")
        proxy = Proxy(S.url, forward)
        self.addCleanup(proxy.close)
        br = AsyncBurnrate(base_url=proxy.url, api_key=S.key, agent_id=agent, on_error=errors.append, retry_base_delay=0.01, run_budget_usd=0.01)
        await br.start()
        first = br.run_id
        self.assertIs(await br.llm_call("gpt-4o", 1000, 500), True)
        self.assertIs(await br.llm_call("gpt-4o", 1000, 500), False)  # 0.015: over the run's 0.01
        self.assertEqual((br.run_stopped, br.run_stopped_reason, br.paused, br.paused_reason), (True, "run_budget", False, None))
        sent = len(proxy.seen)
        self.assertIs(await br.tool_call("search"), False)
        self.assertIs(await br.llm_call("gpt-4o", 1000, 500), False)
        async with br.guard(**WORST) as guard:  # type: ignore[arg-type]
            self.assertEqual((guard.allowed, guard.reason, guard.paused_reason), (False, "run_budget", "run_budget"))
        self.assertIs(await br.refresh(), False)
        self.assertIs(br.run_stopped, True)
        self.assertEqual(routes(proxy, sent), ["GET /agents/" + agent])
        self.assertIs(await br.end(), True)
        self.assertIs(br.run_stopped, False)

        # Buffered: the stop comes in a batch's answer, for the run in which the events were queued.
        buffered = AsyncBurnrate(
            base_url=proxy.url, api_key=S.key, agent_id=agent, on_error=errors.append, retry_base_delay=0.01, buffer=Buffer(max_age=NEVER)
        )
        async with buffered:
            await buffered.start()
            second = buffered.run_id
            self.assertIs(await buffered.llm_call("gpt-4o", 1000, 500, buffered=True), True)
            self.assertIs(await buffered.llm_call("gpt-4o", 1000, 500, buffered=True), True)
            self.assertIs(await buffered.flush(), True)
            self.assertEqual((buffered.run_stopped, buffered.paused), (True, False))
            self.assertIs(await buffered.tool_call("search"), False)
            self.assertEqual(buffered.pending_events, 0)
            self.assertIs(await buffered.end(), True)
            self.assertIs(buffered.run_stopped, False)
            await buffered.start()
            self.assertIs(await buffered.llm_call("gpt-4o", 1000, 500), True)
            self.assertIs(await buffered.end(), True)

        events = await asyncio.to_thread(stored, agent)
        self.assertEqual(events[:4], [("agent_start", first), ("llm_call", first), ("llm_call", first), ("agent_end", first)])
        self.assertEqual(sorted(e for e in events if e[1] == second), sorted([("agent_start", second), ("llm_call", second), ("llm_call", second), ("agent_end", second)]))
        self.assertEqual(errors, [])


if __name__ == "__main__":
    unittest.main()

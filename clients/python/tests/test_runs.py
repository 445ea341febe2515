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


if __name__ == "__main__":
    unittest.main()

"""Retries through a real proxy that loses answers, rate-limits and fails: same event_id,
counted once, Retry-After honoured, bounded, final 4xx not retried."""

from __future__ import annotations

import time
import unittest
from typing import Any, Dict, List, Tuple

from burnrate import Burnrate, BurnrateError

from .support import ModuleServer, Plan, Proxy, problem, unique

S = ModuleServer()


def setUpModule() -> None:
    S.start("py-retries")


def tearDownModule() -> None:
    S.stop()


def on_nth_event(n_bad: int, action: object) -> Plan:
    """`action` for the first n_bad POST /events, forward everything else."""
    return lambda method, path, n: action if (method, path) == ("POST", "/events") and n <= n_bad else "forward"


class RetryTest(unittest.TestCase):
    def setUp(self) -> None:
        self.errors: List[BurnrateError] = []

    def through(self, plan: Plan, **kwargs: object) -> Tuple[Burnrate, Proxy, str]:
        proxy = Proxy(S.url, plan)
        self.addCleanup(proxy.close)
        agent = unique("retry")
        options: Dict[str, Any] = dict(retry_base_delay=0.02, retry_max_delay=2.0, timeout=5.0)
        options.update(kwargs)
        br = Burnrate(base_url=proxy.url, api_key=S.key, agent_id=agent, on_error=self.errors.append, **options)
        return br, proxy, agent

    def event_ids(self, proxy: Proxy) -> List[str]:
        return [s.body["event_id"] for s in proxy.requests("POST", "/events")]

    def test_an_answer_lost_after_storing_is_retried_with_the_same_id_and_counted_once(self) -> None:
        br, proxy, agent = self.through(on_nth_event(1, "drop"))
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), True)

        ids = self.event_ids(proxy)
        self.assertEqual(len(ids), 2)
        self.assertEqual(ids[0], ids[1])
        detail = S.api.agent(agent)
        self.assertEqual(detail["llm_calls"], 1)
        self.assertAlmostEqual(detail["total_cost_usd"], 0.0075, places=9)
        self.assertEqual([e["event_id"] for e in detail["events"]], [ids[0]])
        # The retry's answer: the stored event, acknowledged again with its cost.
        self.assertEqual(br.last_response["event_id"], ids[0])  # type: ignore[index]
        self.assertIs(br.last_response["duplicate"], True)  # type: ignore[index]
        self.assertEqual(br.last_response["cost_usd"], 0.0075)  # type: ignore[index]
        self.assertEqual(self.errors, [])

    def test_a_timeout_is_retried_with_the_same_id_and_counted_once(self) -> None:
        br, proxy, agent = self.through(on_nth_event(1, "stall"), timeout=0.5)
        started = time.monotonic()
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), True)
        self.assertGreaterEqual(time.monotonic() - started, 0.45)
        ids = self.event_ids(proxy)
        self.assertEqual(len(ids), 2)
        self.assertEqual(ids[0], ids[1])
        self.assertEqual(S.api.agent(agent)["llm_calls"], 1)
        self.assertEqual(self.errors, [])

    def test_a_timeout_without_retries_is_reported_as_timeout(self) -> None:
        br, _, _ = self.through(on_nth_event(1, "stall"), timeout=0.3, max_retries=0)
        self.assertIs(br.start(), True)
        self.assertEqual([(e.operation, e.code, e.status, e.attempts) for e in self.errors], [("event", "timeout", None, 1)])

    def test_an_answer_without_a_problem_code_gets_http_status_as_code(self) -> None:
        html = (502, {"content-type": "text/html"}, b"<html>bad gateway</html>")
        br, _, _ = self.through(on_nth_event(1, html), max_retries=0)
        self.assertIs(br.start(), True)
        self.assertEqual([(e.code, e.status, e.retryable) for e in self.errors], [("http_502", 502, True)])

    def test_an_answer_without_paused_is_an_invalid_response(self) -> None:
        ok = (200, {"content-type": "application/json"}, b'{"ok": true}')
        br, proxy, _ = self.through(on_nth_event(1, ok), fail_mode="closed")
        self.assertIs(br.start(), False)
        self.assertEqual(len(proxy.requests("POST", "/events")), 1)
        err = self.errors[0]
        self.assertEqual((err.operation, err.code, err.event_id), ("event", "invalid_response", proxy.seen[0].body["event_id"]))

    def test_each_event_gets_its_own_id(self) -> None:
        br, proxy, _ = self.through(lambda method, path, n: "forward")
        event = {"event_type": "tool_call", "tool_name": "search"}
        br.send(event)
        br.send(event)
        ids = self.event_ids(proxy)
        self.assertEqual(len(set(ids)), 2)
        self.assertNotIn("event_id", event)  # the caller's dict is left alone

    def test_429_waits_for_retry_after(self) -> None:
        br, proxy, agent = self.through(on_nth_event(1, problem(429, "rate_limited", retry_after=1)))
        self.assertIs(br.start(), True)
        seen = proxy.requests("POST", "/events")
        self.assertEqual(len(seen), 2)
        self.assertGreaterEqual(seen[1].at - seen[0].at, 0.9)
        self.assertEqual(seen[0].body["event_id"], seen[1].body["event_id"])
        self.assertEqual(len(S.api.agent(agent)["events"]), 1)
        self.assertEqual(self.errors, [])

    def test_retry_after_is_capped_by_retry_max_delay(self) -> None:
        br, proxy, _ = self.through(on_nth_event(1, problem(503, "store_unavailable", retry_after=120)), retry_max_delay=0.2)
        started = time.monotonic()
        self.assertIs(br.start(), True)
        self.assertLess(time.monotonic() - started, 5)
        self.assertEqual(len(proxy.requests("POST", "/events")), 2)

    def test_5xx_is_retried_then_succeeds(self) -> None:
        br, proxy, agent = self.through(on_nth_event(2, problem(503, "store_unavailable")))
        self.assertIs(br.llm_call("gpt-4o", 10, 10), True)
        self.assertEqual(len(set(self.event_ids(proxy))), 1)
        self.assertEqual(len(proxy.requests("POST", "/events")), 3)
        self.assertEqual(S.api.agent(agent)["llm_calls"], 1)
        self.assertEqual(self.errors, [])

    def test_retries_are_bounded_by_max_retries(self) -> None:
        br, proxy, agent = self.through(on_nth_event(100, problem(500, "internal")), max_retries=2)
        self.assertIs(br.start(), True)  # fail-open
        self.assertEqual(len(proxy.requests("POST", "/events")), 3)
        self.assertEqual(len(self.errors), 1)
        err = self.errors[0]
        self.assertEqual((err.operation, err.status, err.code, err.attempts, err.retryable), ("event", 500, "internal", 3, True))
        self.assertEqual(S.api.agent_status(agent), 404)

    def test_a_final_4xx_is_not_retried(self) -> None:
        br, proxy, _ = self.through(lambda method, path, n: "forward")
        # tool_call without tool_name: the server's 400 names the field; retrying cannot help.
        self.assertIs(br.send({"event_type": "tool_call"}), True)
        self.assertEqual(len(proxy.requests("POST", "/events")), 1)
        self.assertEqual(len(self.errors), 1)
        err = self.errors[0]
        self.assertEqual((err.status, err.code, err.retryable, err.attempts), (400, "invalid_body", False, 1))
        self.assertEqual(err.problem["errors"][0]["field"], "tool_name")  # type: ignore[index]

    def test_an_unknown_key_is_final(self) -> None:
        proxy = Proxy(S.url, lambda method, path, n: "forward")
        self.addCleanup(proxy.close)
        br = Burnrate(
            base_url=proxy.url, api_key="br_nope_nope", agent_id=unique("key"), fail_mode="closed", on_error=self.errors.append
        )
        self.assertIs(br.start(), False)
        self.assertEqual(len(proxy.requests("POST", "/events")), 1)
        self.assertEqual([(e.status, e.code) for e in self.errors], [(401, "unauthorized")])


if __name__ == "__main__":
    unittest.main()

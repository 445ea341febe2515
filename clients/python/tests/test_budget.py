"""Threshold at construction, the pause at the crossing, silence after it, resume."""

from __future__ import annotations

import threading
import time
import unittest
from typing import List

from burnrate import Burnrate, BurnrateError

from .support import ModuleServer, Proxy, problem, unique

S = ModuleServer()


def setUpModule() -> None:
    S.start("py-budget")


def tearDownModule() -> None:
    S.stop()


# gpt-4o: 1000 in / 500 out = 0.0025 + 0.005 = 0.0075 USD; two calls cross 0.01.
GPT4O_IN, GPT4O_OUT, GPT4O_COST = 1000, 500, 0.0075


class BudgetTest(unittest.TestCase):
    def setUp(self) -> None:
        self.errors: List[BurnrateError] = []

    def client(self, agent_id: str, base_url: str = "", **kwargs: object) -> Burnrate:
        return Burnrate(
            base_url=base_url or S.url,
            api_key=S.key,
            agent_id=agent_id,
            on_error=self.errors.append,
            retry_base_delay=0.01,
            **kwargs,  # type: ignore[arg-type]
        )

    def test_threshold_and_webhook_are_sent_at_construction(self) -> None:
        agent = unique("cfg")
        self.assertEqual(S.api.agent_status(agent), 404)
        self.client(agent, cost_threshold_usd=0.25, slack_webhook_url="https://hooks.slack.com/services/T0/B0/secret")
        config = S.api.agent(agent)["config"]
        self.assertEqual(config["cost_threshold_usd"], 0.25)
        self.assertIsNotNone(config["slack_webhook_url"])  # masked by the server, but set
        self.assertEqual(self.errors, [])

    def test_no_threshold_sends_no_config(self) -> None:
        agent = unique("nocfg")
        self.client(agent)
        self.assertEqual(S.api.agent_status(agent), 404)

    def test_send_turns_false_at_the_crossing_and_then_sends_nothing(self) -> None:
        agent = unique("cross")
        proxy = Proxy(S.url, lambda method, path, n: "forward")
        self.addCleanup(proxy.close)
        br = self.client(agent, base_url=proxy.url, cost_threshold_usd=0.01)
        self.assertFalse(br.paused)

        self.assertIsNone(br.last_response)
        self.assertIs(br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), True)
        self.assertFalse(br.paused)
        self.assertIs(br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), False)
        self.assertTrue(br.paused)
        answer = br.last_response
        assert answer is not None
        self.assertEqual((answer["paused"], answer["cost_usd"], answer["total_cost_24h"]), (True, GPT4O_COST, 2 * GPT4O_COST))

        detail = S.api.agent(agent)
        self.assertEqual(detail["llm_calls"], 2)
        self.assertTrue(detail["is_paused"])
        self.assertAlmostEqual(detail["total_cost_usd"], 2 * GPT4O_COST, places=9)

        # Paused: every kind of event returns False and none leaves the process.
        self.assertIs(br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), False)
        self.assertIs(br.tool_call("search"), False)
        self.assertIs(br.end(), False)
        self.assertIs(br.send({"event_type": "agent_start"}), False)
        self.assertEqual(len(proxy.requests("POST", "/events")), 2)
        self.assertEqual(S.api.agent(agent)["llm_calls"], 2)
        self.assertEqual(self.errors, [])

    def test_a_fleet_budget_stops_every_agent_of_the_user_with_its_reason(self) -> None:
        """fleet_budget is a pause like any other; refresh() sees the fleet resumed."""
        assert S.server is not None
        from .support import Api

        key = S.server.create_key(unique("fleet-user"))
        api = Api(S.url, key)
        self.assertEqual(api.call("POST", "/config/fleet", {"cost_threshold_usd": 0.01})[0], 200)
        first = Burnrate(base_url=S.url, api_key=key, agent_id="one", on_error=self.errors.append)
        second = Burnrate(base_url=S.url, api_key=key, agent_id="two", on_error=self.errors.append)
        self.assertIs(first.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), True)
        self.assertIsNone(first.paused_reason)
        self.assertIs(second.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), False)  # 0.015 of 0.01
        self.assertEqual((second.paused, second.paused_reason), (True, "fleet_budget"))
        self.assertIs(first.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), False)
        self.assertEqual(first.paused_reason, "fleet_budget")
        self.assertIs(first.tool_call("search"), False)
        # An operator resumes the fleet by hand: refresh() sees it, and the agent reports again.
        self.assertEqual(api.call("POST", "/config/fleet/pause", {"is_paused": False})[1], {"ok": True, "is_paused": False})
        self.assertIs(first.refresh(), False)
        self.assertIsNone(first.paused_reason)
        self.assertIs(first.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), True)
        self.assertEqual(self.errors, [])

    def test_a_velocity_pause_and_the_ignoring_pause_flag_are_surfaced(self) -> None:
        """paused_reason "velocity"; refresh() reports ignoring_pause when something
        past this client goes on sending for the agent after its pause."""
        agent = unique("fast")
        self.assertEqual(S.api.call("POST", "/config", {"agent_id": agent, "velocity_limit_usd": 0.01, "velocity_window_minutes": 5})[0], 200)
        br = self.client(agent)
        self.assertIs(br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), True)
        self.assertIs(br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), False)  # 0.015 within 5 minutes
        self.assertEqual((br.paused, br.paused_reason, br.ignoring_pause), (True, "velocity", False))
        status, answer = S.api.call("POST", "/events", {"agent_id": agent, "event_type": "llm_call", "model": "gpt-4o", "input_tokens": GPT4O_IN, "output_tokens": GPT4O_OUT})
        self.assertEqual((status, answer["paused"]), (200, True))
        self.assertIs(br.refresh(), True)
        self.assertEqual((br.paused_reason, br.ignoring_pause), ("velocity", True))
        self.assertEqual(self.errors, [])

    def test_remaining_projection_and_on_alert_once_per_level(self) -> None:
        """What is left, when it runs out, and each alert level crossed told once."""
        agent = unique("alerts")
        seen: List[object] = []
        br = self.client(agent, cost_threshold_usd=0.03, alert_at=(0.75, 0.5), on_alert=lambda levels, answer: seen.append((levels, answer["total_cost_24h"])))
        self.assertIsNone(br.remaining_usd)
        self.assertIsNone(br.projected_exhaustion_at)
        self.assertIs(br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), True)
        self.assertAlmostEqual(br.remaining_usd or 0, 0.03 - GPT4O_COST, places=9)
        at = br.projected_exhaustion_at
        assert at is not None
        # All of it in the last hour: the rest (three calls' worth) at this rate takes 3 hours.
        self.assertAlmostEqual(at.timestamp() - time.time(), 3 * 3600, delta=300)
        for _ in range(3):
            self.assertIs(br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), True)
        self.assertEqual([levels for levels, _ in seen], [[0.5], [0.75]])  # type: ignore[misc]
        self.assertAlmostEqual(seen[0][1], 2 * GPT4O_COST, places=9)  # type: ignore[index]
        self.assertEqual(S.api.agent(agent)["config"]["alert_at"], [0.5, 0.75])
        self.assertEqual(self.errors, [])

    def test_a_raising_on_alert_does_not_stop_the_agent(self) -> None:
        def boom(levels: List[float], answer: object) -> None:
            raise RuntimeError("boom")

        br = self.client(unique("alerts-boom"), cost_threshold_usd=0.01, on_alert=boom)
        with self.assertLogs("burnrate", level="ERROR"):
            self.assertIs(br.llm_call("gpt-4o", 1000, 650), True)  # 0.009 of 0.01: 0.8 crossed
        self.assertFalse(br.paused)

    def test_bad_alert_levels_are_refused_at_construction(self) -> None:
        for levels in ([1], [0], [0.5, 0.5], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], "0.8", [True]):
            with self.assertRaises(ValueError):
                self.client(unique("bad"), alert_at=levels)

    def test_operator_resume_then_refresh_lets_it_send_again(self) -> None:
        agent = unique("resume")
        br = self.client(agent, cost_threshold_usd=0.01)
        br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT)
        self.assertIs(br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), False)

        self.assertIs(br.refresh(), True)  # still paused on the server
        self.assertTrue(br.paused)

        S.api.set_paused(agent, False)
        self.assertIs(br.refresh(), False)
        self.assertFalse(br.paused)
        # A manual resume over budget holds (docs/api.md, "Budget rules"): the agent runs.
        self.assertIs(br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), True)
        self.assertEqual(S.api.agent(agent)["llm_calls"], 3)
        self.assertEqual(self.errors, [])

    def test_refresh_sees_a_manual_pause(self) -> None:
        agent = unique("manual")
        br = self.client(agent)
        self.assertIs(br.start(), True)
        S.api.set_paused(agent, True)
        self.assertIs(br.refresh(), True)
        self.assertIs(br.tool_call("search"), False)
        self.assertEqual(len(S.api.agent(agent)["events"]), 1)

    def test_refresh_of_an_unknown_agent_is_not_paused(self) -> None:
        br = self.client(unique("unknown"))
        self.assertIs(br.refresh(), False)
        self.assertFalse(br.paused)
        self.assertEqual(self.errors, [])

    def test_wait_until_resumed_returns_true_once_resumed(self) -> None:
        agent = unique("wait")
        br = self.client(agent)
        self.assertIs(br.start(), True)
        S.api.set_paused(agent, True)
        self.assertIs(br.refresh(), True)

        resumer = threading.Timer(0.5, S.api.set_paused, args=(agent, False))
        started = time.monotonic()
        resumer.start()
        self.addCleanup(resumer.cancel)
        self.assertIs(br.wait_until_resumed(poll_interval=0.05, timeout=20), True)
        self.assertGreaterEqual(time.monotonic() - started, 0.45)
        self.assertFalse(br.paused)
        self.assertIs(br.end(), True)
        resumer.join(5)

    def test_wait_until_resumed_times_out(self) -> None:
        agent = unique("waitout")
        br = self.client(agent)
        br.start()
        S.api.set_paused(agent, True)
        started = time.monotonic()
        self.assertIs(br.wait_until_resumed(poll_interval=0.05, timeout=0.3), False)
        elapsed = time.monotonic() - started
        self.assertGreaterEqual(elapsed, 0.3)
        self.assertLess(elapsed, 5)
        self.assertTrue(br.paused)

    def test_a_failed_config_is_sent_again_before_the_next_event(self) -> None:
        agent = unique("cfgretry")
        # POST /config fails the first time (500, and no retries are allowed), then works.
        def plan(method: str, path: str, n: int) -> object:
            return problem(500, "boom") if path == "/config" and n == 1 else "forward"

        proxy = Proxy(S.url, plan)
        self.addCleanup(proxy.close)

        br = self.client(agent, base_url=proxy.url, cost_threshold_usd=0.5, max_retries=0)
        self.assertEqual([(e.operation, e.status) for e in self.errors], [("config", 500)])
        self.assertEqual(S.api.agent_status(agent), 404)

        self.assertIs(br.start(), True)
        self.assertEqual(len(proxy.requests("POST", "/config")), 2)
        self.assertEqual(S.api.agent(agent)["config"]["cost_threshold_usd"], 0.5)
        br.end()
        self.assertEqual(len(proxy.requests("POST", "/config")), 2)  # once it worked, never again

    def test_fail_closed_does_not_go_on_without_its_budget(self) -> None:
        agent = unique("cfgclosed")
        def plan(method: str, path: str, n: int) -> object:
            return problem(500, "boom") if path == "/config" else "forward"

        proxy = Proxy(S.url, plan)
        self.addCleanup(proxy.close)
        br = self.client(agent, base_url=proxy.url, cost_threshold_usd=0.5, max_retries=0, fail_mode="closed")
        self.assertIs(br.start(), False)
        # The event itself was still metered.
        self.assertEqual(len(S.api.agent(agent)["events"]), 1)


if __name__ == "__main__":
    unittest.main()

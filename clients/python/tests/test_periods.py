"""Period budgets through the client: set at construction, a pause named by its period, the
periods each answer shows, hold refusals, a fleet's; sync and async."""

from __future__ import annotations

import unittest
from datetime import datetime, timedelta, timezone
from typing import List

from burnrate import AsyncBurnrate, Burnrate, BurnrateError, Period

from .support import Api, ModuleServer, Proxy, unique

S = ModuleServer()


def setUpModule() -> None:
    S.start("py-periods")


def tearDownModule() -> None:
    S.stop()


# gpt-4o: 1000 in / 500 out = 0.0025 + 0.005 = 0.0075 USD; one call stays within 0.01, two go over.
GPT4O_IN, GPT4O_OUT, GPT4O_COST = 1000, 500, 0.0075
LIMIT_USD = 0.01


class PeriodBudgetTest(unittest.TestCase):
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

    def test_a_month_budget_set_at_construction_pauses_past_its_limit_and_the_client_stops(self) -> None:
        agent = unique("month")
        proxy = Proxy(S.url, lambda method, path, n: "forward")
        self.addCleanup(proxy.close)
        br = self.client(agent, base_url=proxy.url, period_budgets=[{"period": "month", "limit_usd": LIMIT_USD, "time_zone": "Asia/Kolkata"}])
        self.assertEqual(
            [s.body for s in proxy.requests("POST", "/config")],
            [{"agent_id": agent, "period_budgets": [{"period": "month", "limit_usd": LIMIT_USD, "time_zone": "Asia/Kolkata"}]}],
        )
        self.assertIsNone(br.periods)

        self.assertIs(br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), True)
        periods = br.periods
        assert periods is not None
        self.assertEqual(len(periods), 1)
        month = periods[0]
        self.assertIsInstance(month, Period)
        self.assertEqual((month.period, month.limit_usd), ("month", LIMIT_USD))
        self.assertAlmostEqual(month.spent_usd, GPT4O_COST, places=9)
        self.assertAlmostEqual(month.remaining_usd, LIMIT_USD - GPT4O_COST, places=9)
        # This month in Kolkata (UTC+05:30, no summer time): from local midnight of the 1st to the next one.
        assert month.ends_at is not None
        kolkata = timezone(timedelta(hours=5, minutes=30))
        for bound in (month.starts_at, month.ends_at):
            local = bound.astimezone(kolkata)
            self.assertEqual((local.day, local.hour, local.minute), (1, 0, 0))
        self.assertLessEqual(month.starts_at, datetime.now(timezone.utc))
        self.assertGreater(month.ends_at, datetime.now(timezone.utc))
        self.assertIsNotNone(month.projected_exhaustion_at)
        self.assertEqual((br.paused, br.paused_reason, br.paused_period), (False, None, None))

        self.assertIs(br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), False)  # 0.015 of 0.01 this month
        self.assertEqual((br.paused, br.paused_reason, br.paused_period), (True, "period_budget", "month"))
        answer = br.last_response
        assert answer is not None
        self.assertEqual((answer["paused_reason"], answer["paused_period"]), ("period_budget", "month"))
        periods = br.periods
        assert periods is not None
        self.assertAlmostEqual(periods[0].spent_usd, 2 * GPT4O_COST, places=9)
        self.assertAlmostEqual(periods[0].remaining_usd, LIMIT_USD - 2 * GPT4O_COST, places=9)

        # Paused: nothing more leaves the process.
        self.assertIs(br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), False)
        self.assertIs(br.tool_call("search"), False)
        self.assertIs(br.end(), False)
        self.assertEqual(len(proxy.requests("POST", "/events")), 2)

        # refresh() reads the same pause from GET /agents/{id}.
        self.assertIs(br.refresh(), True)
        self.assertEqual((br.paused_reason, br.paused_period), ("period_budget", "month"))
        detail = S.api.agent(agent)
        self.assertEqual((detail["llm_calls"], detail["paused_reason"], detail["paused_period"]), (2, "period_budget", "month"))
        self.assertEqual(self.errors, [])

    def test_a_hold_that_would_take_a_period_over_its_limit_is_refused_as_period_budget(self) -> None:
        br = self.client(unique("hold"), period_budgets=[{"window_days": 7, "limit_usd": LIMIT_USD}])
        # 1000 in and at most 1000 out: 0.0125 at worst, more than the window's 0.01.
        with br.guard(model="gpt-4o", input_tokens=1000, max_output_tokens=1000) as guard:
            self.assertEqual((guard.allowed, guard.reason, guard.paused_reason, guard.paused_period), (False, "period_budget", None, None))
        self.assertFalse(br.paused)
        with br.guard(model="gpt-4o", input_tokens=1000, max_output_tokens=500) as guard:
            self.assertIs(guard.allowed, True)
            self.assertIs(guard.llm_call(GPT4O_IN, GPT4O_OUT), True)
        periods = br.periods
        assert periods is not None
        self.assertEqual([(p.period, p.limit_usd, p.ends_at) for p in periods], [("window_7d", LIMIT_USD, None)])
        self.assertAlmostEqual(periods[0].spent_usd, GPT4O_COST, places=9)
        self.assertEqual(self.errors, [])

    def test_a_fleet_period_budget_stops_every_agent_as_fleet_period_budget_until_resumed(self) -> None:
        assert S.server is not None
        key = S.server.create_key(unique("fleet-user"))
        api = Api(S.url, key)
        status, _ = api.call("POST", "/config/fleet", {"cost_threshold_usd": 100, "period_budgets": [{"window_days": 30, "limit_usd": LIMIT_USD}]})
        self.assertEqual(status, 200)
        first = Burnrate(base_url=S.url, api_key=key, agent_id="one", on_error=self.errors.append)
        second = Burnrate(base_url=S.url, api_key=key, agent_id="two", on_error=self.errors.append)
        self.assertIs(first.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), True)
        self.assertIs(second.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), False)  # the fleet's 0.015 of 0.01 in 30 days
        self.assertEqual((second.paused_reason, second.paused_period), ("fleet_period_budget", "window_30d"))
        self.assertEqual(second.periods, [])  # the agent has no period budget of its own
        self.assertIs(first.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), False)
        self.assertEqual((first.paused_reason, first.paused_period), ("fleet_period_budget", "window_30d"))

        self.assertEqual(api.call("POST", "/config/fleet/pause", {"is_paused": False})[0], 200)
        self.assertIs(first.refresh(), False)
        self.assertEqual((first.paused, first.paused_reason, first.paused_period), (False, None, None))
        self.assertIs(first.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), True)  # a manual resume overrides the spent window
        self.assertEqual(self.errors, [])

    def test_a_time_zone_the_server_does_not_know_is_a_config_failure_and_the_event_still_goes(self) -> None:
        agent = unique("badzone")
        br = self.client(agent, period_budgets=[{"period": "day", "limit_usd": 1, "time_zone": "Mars/Olympus_Mons"}])
        self.assertEqual([(e.operation, e.status) for e in self.errors], [("config", 400)])
        self.assertIn("time_zone", str(self.errors[0].problem))
        self.assertIs(br.start(), True)
        self.assertEqual(len(S.api.agent(agent)["events"]), 1)

    def test_period_budgets_the_server_would_refuse_raise_at_construction(self) -> None:
        bad = [
            {"period": "month", "limit_usd": 1},  # not a list
            [{"window_days": d, "limit_usd": 1} for d in range(1, 6)],
            [{"period": "year", "limit_usd": 1}],
            [{"period": "month", "limit_usd": 0}],
            [{"period": "month", "limit_usd": 2e9}],
            [{"period": "month", "limit_usd": True}],
            [{"period": "month"}],
            [{"period": "month", "limit_usd": 1, "time_zone": ""}],
            [{"period": "week", "limit_usd": 1, "week_starts": "saturday"}],
            [{"period": "month", "limit_usd": 1, "month_starts_on": 29}],
            [{"window_days": 0, "limit_usd": 1}],
            [{"window_days": 7, "limit_usd": 1, "time_zone": "UTC"}],
            [{"period": "day", "limitUsd": 1}],
            [{"period": "day", "limit_usd": 1}, {"period": "day", "limit_usd": 2}],
            [{"window_days": 7, "limit_usd": 1}, {"window_days": 7, "limit_usd": 2}],
            [None],
        ]
        for budgets in bad:
            with self.subTest(budgets=budgets), self.assertRaises(ValueError):
                self.client(unique("bad"), period_budgets=budgets)


class AsyncPeriodBudgetTest(unittest.IsolatedAsyncioTestCase):
    async def test_the_async_client_sets_them_and_reports_the_pause_and_its_periods(self) -> None:
        errors: List[BurnrateError] = []
        br = AsyncBurnrate(
            base_url=S.url,
            api_key=S.key,
            agent_id=unique("async-week"),
            period_budgets=[{"period": "week", "limit_usd": LIMIT_USD, "week_starts": "sunday"}],
            on_error=errors.append,
        )
        self.assertIs(await br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), True)
        self.assertIs(await br.llm_call("gpt-4o", GPT4O_IN, GPT4O_OUT), False)
        self.assertEqual((br.paused, br.paused_reason, br.paused_period), (True, "period_budget", "week"))
        periods = br.periods
        assert periods is not None and periods[0].ends_at is not None
        self.assertEqual(periods[0].period, "week")
        self.assertEqual(periods[0].starts_at.astimezone(timezone.utc).weekday(), 6)  # a Sunday, UTC midnight
        self.assertEqual(periods[0].ends_at - periods[0].starts_at, timedelta(days=7))
        self.assertIs(await br.tool_call("search"), False)
        self.assertEqual(errors, [])


if __name__ == "__main__":
    unittest.main()

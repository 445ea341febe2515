"""Budget holds: a guarded call holds its worst case, its report settles the hold once, a
refusal runs nothing, and a hold the call leaves unsettled is released; sync and async."""

from __future__ import annotations

import asyncio
import re
import time
import unittest
from datetime import datetime, timezone
from typing import Any, Dict, List, Tuple

from burnrate import AsyncBurnrate, AsyncGuard, Burnrate, BurnrateError, Guard

from .support import Api, ModuleServer, Plan, Proxy, dead_url, problem, unique

S = ModuleServer()


def setUpModule() -> None:
    S.start("py-guard")


def tearDownModule() -> None:
    S.stop()


# gpt-4o at 2.5 / 10 USD per 1M tokens: 1000 in and at most 1000 out is 0.0125 at worst;
# the call made, 1000 in and 500 out, costs 0.0075.
CALL: Dict[str, Any] = dict(model="gpt-4o", input_tokens=1000, max_output_tokens=1000)
WORST, COST = 0.0125, 0.0075
USAGE = {"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}
UUID = re.compile("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


class Boom(Exception):
    pass


def forward(method: str, path: str, n: int) -> object:
    return "forward"


def deletes(proxy: Proxy) -> List[str]:
    with proxy._lock:
        return [s.path for s in proxy.seen if s.method == "DELETE"]


def options(proxy: Proxy, agent: str, errors: List[BurnrateError], overrides: Dict[str, Any]) -> Dict[str, Any]:
    """A client's options in these tests: through `proxy`, errors kept, quick retries, a 1 USD budget."""
    return {**dict(base_url=proxy.url, api_key=S.key, agent_id=agent, on_error=errors.append, retry_base_delay=0.01, cost_threshold_usd=1.0), **overrides}


def held(agent: str) -> float:
    return float(S.api.agent(agent)["held_usd"])


class GuardTest(unittest.TestCase):
    def setUp(self) -> None:
        self.errors: List[BurnrateError] = []

    def client(self, plan: Plan = forward, **kwargs: Any) -> Tuple[Burnrate, Proxy, str]:
        proxy = Proxy(S.url, plan)
        self.addCleanup(proxy.close)
        agent = unique("guard")
        return Burnrate(**options(proxy, agent, self.errors, kwargs)), proxy, agent

    def test_a_granted_call_reported_with_its_hold_settles_it(self) -> None:
        br, proxy, agent = self.client()
        with br.guard(ttl_seconds=60, **CALL) as guard:
            self.assertEqual((guard.allowed, guard.reason, guard.paused_reason), (True, None, None))
            assert guard.hold_id is not None and guard.expires_at is not None
            self.assertRegex(guard.hold_id, UUID)
            self.assertEqual((guard.held_usd, guard.worst_case_usd), (WORST, WORST))
            self.assertAlmostEqual(guard.remaining_usd or 0, 1.0 - WORST, places=9)
            self.assertAlmostEqual(guard.expires_at.timestamp() - time.time(), 60, delta=30)
            self.assertEqual(held(agent), WORST)  # counted against the budget while the call runs
            self.assertIs(guard.llm_call(input_tokens=1000, output_tokens=500), True)
            self.assertIs(guard.reported, True)
        self.assertEqual(proxy.requests("POST", "/holds")[0].body["ttl_seconds"], 60)
        (event,) = proxy.requests("POST", "/events")
        self.assertEqual((event.body["hold_id"], event.body["model"]), (guard.hold_id, "gpt-4o"))
        detail = S.api.agent(agent)
        self.assertEqual((detail["held_usd"], detail["llm_calls"]), (0, 1))
        self.assertAlmostEqual(detail["total_cost_usd"], COST, places=9)
        self.assertEqual(deletes(proxy), [])  # settled by its report: nothing to release
        self.assertEqual(self.errors, [])

    def test_a_hold_retried_after_a_lost_answer_is_held_once(self) -> None:
        def plan(method: str, path: str, n: int) -> object:
            return "drop" if (method, path, n) == ("POST", "/holds", 1) else "forward"

        br, proxy, agent = self.client(plan)
        with br.guard(**CALL) as guard:
            self.assertIs(guard.allowed, True)
            self.assertAlmostEqual(held(agent), WORST, places=9)  # one hold, not two
        sent = proxy.requests("POST", "/holds")
        self.assertEqual(len(sent), 2)
        self.assertEqual({s.body["hold_id"] for s in sent}, {guard.hold_id})
        self.assertEqual(held(agent), 0)
        self.assertEqual(self.errors, [])

    def test_a_report_retried_after_a_lost_answer_settles_once_and_counts_once(self) -> None:
        def plan(method: str, path: str, n: int) -> object:
            return "drop" if (method, path, n) == ("POST", "/events", 1) else "forward"

        br, proxy, agent = self.client(plan)
        with br.guard(**CALL) as guard:
            self.assertIs(guard.from_openai_chat("gpt-4o", USAGE), True)
        sent = proxy.requests("POST", "/events")
        self.assertEqual(len(sent), 2)
        self.assertEqual({(s.body["event_id"], s.body["hold_id"]) for s in sent}, {(sent[0].body["event_id"], guard.hold_id)})
        self.assertIs(br.last_response["duplicate"], True)  # type: ignore[index]
        detail = S.api.agent(agent)
        self.assertEqual((detail["held_usd"], detail["llm_calls"]), (0, 1))
        self.assertAlmostEqual(detail["total_cost_usd"], COST, places=9)
        self.assertEqual(self.errors, [])

    def test_the_decorator_runs_the_function_under_its_own_hold(self) -> None:
        br, proxy, agent = self.client()
        holds: List[str] = []

        @br.guarded(**CALL)
        def ask(guard: Guard, prompt: str) -> str:
            """Makes the call."""
            assert guard.hold_id is not None
            holds.append(guard.hold_id)
            guard.from_openai_chat("gpt-4o", USAGE)
            return prompt.upper()

        self.assertEqual((ask.__name__, ask.__doc__), ("ask", "Makes the call."))
        self.assertEqual(ask("hi"), "HI")
        self.assertEqual(ask(prompt="again"), "AGAIN")
        self.assertEqual(len(set(holds)), 2)
        self.assertEqual([s.body["hold_id"] for s in proxy.requests("POST", "/events")], holds)
        detail = S.api.agent(agent)
        self.assertEqual((detail["held_usd"], detail["llm_calls"]), (0, 2))
        self.assertAlmostEqual(detail["total_cost_usd"], 2 * COST, places=9)
        self.assertEqual(self.errors, [])

    def test_refused_over_budget_nothing_runs_and_nothing_is_held(self) -> None:
        br, proxy, agent = self.client(cost_threshold_usd=0.01)  # the worst case, 0.0125, does not fit
        ran: List[str] = []
        with br.guard(**CALL) as guard:
            if guard.allowed:
                ran.append("body")
        self.assertEqual((guard.allowed, guard.reason, guard.hold_id, guard.held_usd), (False, "budget", None, 0.0))
        self.assertEqual((guard.worst_case_usd, guard.remaining_usd, guard.expires_at), (WORST, 0.01, None))
        with self.assertRaises(RuntimeError):
            guard.llm_call(input_tokens=1000, output_tokens=500)

        @br.guarded(**CALL)
        def ask(guard: Guard) -> str:
            ran.append("function")
            return "answer"

        self.assertIsNone(ask())
        self.assertEqual(ran, [])
        self.assertFalse(br.paused)  # over budget for this call is not a pause
        self.assertEqual(len(proxy.requests("POST", "/holds")), 2)
        self.assertEqual((proxy.requests("POST", "/events"), deletes(proxy)), ([], []))
        detail = S.api.agent(agent)
        self.assertEqual((detail["held_usd"], detail["llm_calls"]), (0, 0))
        self.assertEqual(self.errors, [])

    def test_refused_over_the_fleet_budget(self) -> None:
        assert S.server is not None
        key = S.server.create_key(unique("fleet-user"))
        self.assertEqual(Api(S.url, key).call("POST", "/config/fleet", {"cost_threshold_usd": 0.01})[0], 200)
        br = Burnrate(base_url=S.url, api_key=key, agent_id="one", on_error=self.errors.append)
        with br.guard(**CALL) as guard:
            pass
        self.assertEqual((guard.allowed, guard.reason, guard.remaining_usd), (False, "fleet_budget", 0.01))
        self.assertFalse(br.paused)
        self.assertEqual(self.errors, [])

    def test_a_paused_refusal_pauses_the_client_and_the_next_guard_asks_nothing(self) -> None:
        br, proxy, agent = self.client()
        self.assertIs(br.start(), True)
        S.api.set_paused(agent, True)  # the client does not know yet
        with br.guard(**CALL) as guard:
            self.assertFalse(guard.allowed)
        self.assertEqual((guard.reason, guard.paused_reason, guard.hold_id), ("paused", "manual", None))
        self.assertEqual((br.paused, br.paused_reason), (True, "manual"))
        self.assertIs(br.tool_call("search"), False)  # as after a paused event answer: nothing sent
        with br.guard(**CALL) as again:
            pass
        self.assertEqual((again.allowed, again.reason, again.paused_reason), (False, "paused", "manual"))
        self.assertEqual(len(proxy.requests("POST", "/holds")), 1)
        self.assertEqual(len(proxy.requests("POST", "/events")), 1)

        S.api.set_paused(agent, False)
        self.assertIs(br.refresh(), False)
        with br.guard(**CALL) as resumed:
            self.assertIs(resumed.allowed, True)
            resumed.llm_call(1000, 500)
        self.assertEqual(S.api.agent(agent)["held_usd"], 0)
        self.assertEqual(self.errors, [])

    def test_a_body_that_raises_releases_the_hold_and_the_exception_propagates(self) -> None:
        br, proxy, agent = self.client()
        with self.assertRaises(Boom):
            with br.guard(**CALL) as guard:
                self.assertEqual(held(agent), WORST)
                raise Boom("the provider failed")
        self.assertEqual(deletes(proxy), ["/holds/" + str(guard.hold_id)])
        self.assertEqual(held(agent), 0)

        @br.guarded(**CALL)
        def ask(guard: Guard) -> None:
            raise Boom("again")

        with self.assertRaises(Boom):
            ask()
        self.assertEqual(len(deletes(proxy)), 2)
        detail = S.api.agent(agent)
        self.assertEqual((detail["held_usd"], detail["llm_calls"]), (0, 0))
        self.assertEqual(self.errors, [])

    def test_a_body_that_does_not_report_releases_the_hold(self) -> None:
        br, proxy, agent = self.client()
        with br.guard(**CALL) as guard:
            self.assertTrue(guard.allowed)
        self.assertIs(guard.reported, False)
        self.assertEqual(deletes(proxy), ["/holds/" + str(guard.hold_id)])
        self.assertEqual(held(agent), 0)

        # Paused by another call while this one ran: the call was made, so its report is sent
        # all the same (its cost counts, and it settles the hold); it answers False (paused).
        with br.guard(**CALL) as guard:
            S.api.set_paused(agent, True)
            self.assertIs(br.start(), False)
            self.assertIs(guard.llm_call(1000, 500), False)
        self.assertIs(guard.reported, True)
        self.assertEqual(len(deletes(proxy)), 1)
        self.assertEqual(held(agent), 0)
        self.assertEqual(S.api.agent(agent)["llm_calls"], 1)
        self.assertIs(br.llm_call("gpt-4o", 1000, 500), False)  # nothing else is sent
        self.assertEqual(S.api.agent(agent)["llm_calls"], 1)
        self.assertEqual(self.errors, [])

    def test_a_release_that_fails_goes_to_on_error_and_one_already_gone_is_fine(self) -> None:
        br, proxy, agent = self.client(lambda method, path, n: problem(500, "internal") if method == "DELETE" else "forward", max_retries=1)
        with br.guard(**CALL) as guard:
            pass
        self.assertEqual(len(deletes(proxy)), 2)  # retried like any 5xx
        self.assertEqual([(e.operation, e.status, e.code) for e in self.errors], [("release", 500, "internal")])
        self.assertEqual(held(agent), WORST)  # still open: it expires at its ttl
        S.api.call("DELETE", "/holds/" + str(guard.hold_id))

        self.errors.clear()
        br, proxy, agent = self.client()
        with br.guard(**CALL) as guard:
            self.assertEqual(S.api.call("DELETE", "/holds/" + str(guard.hold_id))[0], 200)
        self.assertEqual(len(deletes(proxy)), 1)  # answered 404 hold_not_found: nothing to report
        self.assertEqual(self.errors, [])

    def test_a_hold_refused_by_a_failing_store_is_retried(self) -> None:
        def plan(method: str, path: str, n: int) -> object:
            return problem(503, "store_unavailable") if (method, path) == ("POST", "/holds") and n <= 2 else "forward"

        br, proxy, agent = self.client(plan)
        with br.guard(**CALL) as guard:
            self.assertTrue(guard.allowed)
            guard.llm_call(1000, 500)
        self.assertEqual(len(proxy.requests("POST", "/holds")), 3)
        self.assertEqual(S.api.agent(agent)["held_usd"], 0)
        self.assertEqual(self.errors, [])

    def test_a_hold_id_as_an_event_field_is_lower_cased(self) -> None:
        br, proxy, agent = self.client()
        status, answer = S.api.call("POST", "/holds", {"agent_id": agent, **CALL})
        self.assertEqual((status, answer["allowed"]), (200, True))
        self.assertIs(br.llm_call("gpt-4o", 1000, 500, hold_id=answer["hold_id"].upper()), True)
        self.assertEqual(proxy.requests("POST", "/events")[0].body["hold_id"], answer["hold_id"])
        self.assertEqual(held(agent), 0)
        self.assertEqual(self.errors, [])


class GuardFailModeTest(unittest.TestCase):
    def setUp(self) -> None:
        self.errors: List[BurnrateError] = []

    def dead(self, fail_mode: Any, **kwargs: Any) -> Burnrate:
        options: dict = dict(api_key="br_x_y", agent_id=unique("dead"), max_retries=1, retry_base_delay=0.01)
        options.update(kwargs)
        return Burnrate(base_url=dead_url(), fail_mode=fail_mode, on_error=self.errors.append, **options)

    def test_open_allows_the_call_without_a_hold(self) -> None:
        br = self.dead("open")
        with br.guard(**CALL) as guard:
            self.assertEqual((guard.allowed, guard.reason, guard.hold_id, guard.held_usd), (True, None, None, 0.0))
            self.assertIs(guard.llm_call(1000, 500), True)
        self.assertEqual([(e.operation, e.code, e.attempts) for e in self.errors], [("hold", "network_error", 2), ("event", "network_error", 2)])
        ran: List[str] = []

        @br.guarded(**CALL)
        def ask(guard: Guard) -> str:
            ran.append("function")
            return "answer"

        self.assertEqual((ask(), ran), ("answer", ["function"]))

    def test_open_reports_go_out_without_a_hold_id(self) -> None:
        proxy = Proxy(S.url, lambda method, path, n: problem(500, "internal") if path == "/holds" else "forward")
        self.addCleanup(proxy.close)
        br = Burnrate(base_url=proxy.url, api_key=S.key, agent_id=unique("open"), on_error=self.errors.append, max_retries=0)
        with br.guard(**CALL) as guard:
            self.assertIs(guard.from_openai_chat("gpt-4o", USAGE), True)
        self.assertNotIn("hold_id", proxy.requests("POST", "/events")[0].body)
        self.assertEqual([(e.operation, e.status) for e in self.errors], [("hold", 500)])

    def test_closed_refuses_as_unreachable(self) -> None:
        br = self.dead("closed")
        ran: List[str] = []
        with br.guard(**CALL) as guard:
            if guard.allowed:
                ran.append("body")
        self.assertEqual((guard.allowed, guard.reason, guard.hold_id), (False, "unreachable", None))
        with self.assertRaises(RuntimeError):
            guard.from_openai_chat("gpt-4o", USAGE)

        @br.guarded(**CALL)
        def ask(guard: Guard) -> str:
            ran.append("function")
            return "answer"

        self.assertIsNone(ask())
        self.assertEqual(ran, [])
        self.assertEqual([e.operation for e in self.errors], ["hold", "hold"])
        self.assertFalse(br.paused)  # not paused by burnrate: the next guard asks again

    def test_closed_without_its_budget_in_place_asks_for_no_hold(self) -> None:
        proxy = Proxy(S.url, lambda method, path, n: problem(500, "internal") if path == "/config" else "forward")
        self.addCleanup(proxy.close)
        br = Burnrate(base_url=proxy.url, api_key=S.key, agent_id=unique("nocfg"), cost_threshold_usd=1.0,
                      fail_mode="closed", on_error=self.errors.append, max_retries=0)
        with br.guard(**CALL) as guard:
            pass
        self.assertEqual((guard.allowed, guard.reason), (False, "unreachable"))
        self.assertEqual(proxy.requests("POST", "/holds"), [])
        self.assertEqual([e.operation for e in self.errors], ["config", "config"])  # constructor, then guard


class GuardArgumentTest(unittest.TestCase):
    def setUp(self) -> None:
        self.errors: List[BurnrateError] = []
        # Nothing listens there: a check that let a request through would report an error.
        self.br = Burnrate(base_url=dead_url(), api_key="k", agent_id="a", max_retries=0, on_error=self.errors.append)

    def tearDown(self) -> None:
        self.assertEqual(self.errors, [])

    def test_invalid_hold_arguments_raise_value_error(self) -> None:
        bad: List[dict] = [
            dict(model=""),
            dict(model="m" * 257),
            dict(model=42),
            dict(input_tokens=-1),
            dict(input_tokens=1.5),
            dict(input_tokens=True),
            dict(input_tokens="1000"),
            dict(max_output_tokens=1_000_000_001),
            dict(max_output_tokens=None),
            dict(ttl_seconds=0),
            dict(ttl_seconds=3601),
            dict(ttl_seconds=2.5),
            dict(ttl_seconds=True),
        ]
        for kwargs in bad:
            options: dict = dict(CALL)
            options.update(kwargs)
            with self.subTest(**{k: repr(v) for k, v in kwargs.items()}):
                with self.assertRaises(ValueError):
                    self.br.guard(**options)
                with self.assertRaises(ValueError):
                    self.br.guarded(**options)
                with self.assertRaises(ValueError):
                    AsyncBurnrate(base_url=dead_url(), api_key="k", agent_id="a").guard(**options)

    def test_the_decorators_take_functions_of_their_kind(self) -> None:
        async def coroutine(guard: Any) -> None:
            pass

        def plain(guard: Any) -> None:
            pass

        with self.assertRaises(TypeError):
            self.br.guarded(**CALL)(coroutine)
        with self.assertRaises(TypeError):
            self.br.guarded(**CALL)("not a function")  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            AsyncBurnrate(base_url=dead_url(), api_key="k", agent_id="a").guarded(**CALL)(plain)  # type: ignore[arg-type]

    def test_an_event_hold_id_is_a_uuid_on_an_llm_call(self) -> None:
        hold_id = "9b2f0000-0000-4000-8000-000000000000"
        for bad in ("not-a-hold", 42, "{%s}" % hold_id, hold_id.replace("-", ""), "9b2f0000-0000-0000-8000-000000000000"):
            with self.subTest(hold_id=bad), self.assertRaises(ValueError):
                self.br.llm_call("gpt-4o", 1, 1, hold_id=bad)
        with self.assertRaises(ValueError):
            self.br.send({"event_type": "tool_call", "tool_name": "search", "hold_id": hold_id})
        self.br._learn({"paused": True, "paused_reason": "manual"}, event=False)
        with self.assertRaises(ValueError):  # a programming error raises, paused or not
            self.br.llm_call("gpt-4o", 1, 1, hold_id="nope")
        with self.assertRaises(ValueError):
            asyncio.run(AsyncBurnrate(base_url=dead_url(), api_key="k", agent_id="a").send({"event_type": "agent_start", "hold_id": hold_id}))

    def test_a_guard_reports_only_once_entered_and_allowed_and_is_entered_once(self) -> None:
        guard = self.br.guard(**CALL)
        with self.assertRaises(RuntimeError):
            guard.llm_call(1, 1)  # not entered
        self.br._learn({"paused": True, "paused_reason": "budget"}, event=False)
        with guard:
            self.assertEqual((guard.allowed, guard.reason, guard.paused_reason), (False, "paused", "budget"))
            with self.assertRaises(RuntimeError):
                guard.from_anthropic("claude-sonnet-4-5", {"input_tokens": 1, "output_tokens": 1})
        with self.assertRaises(RuntimeError):
            guard.__enter__()

    def test_a_guard_report_sets_hold_id_itself(self) -> None:
        with self.br.guard(**CALL) as guard:
            with self.assertRaises(TypeError):
                guard.llm_call(1, 1, hold_id="9b2f0000-0000-4000-8000-000000000000")
        self.errors.clear()  # the hold itself could not be asked (fail-open): not under test


class AsyncGuardTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self.errors: List[BurnrateError] = []

    def client(self, plan: Plan = forward, **kwargs: Any) -> Tuple[AsyncBurnrate, Proxy, str]:
        proxy = Proxy(S.url, plan)
        self.addCleanup(proxy.close)
        agent = unique("aguard")
        return AsyncBurnrate(**options(proxy, agent, self.errors, kwargs)), proxy, agent

    async def agent(self, agent: str) -> Any:
        return await asyncio.to_thread(S.api.agent, agent)

    async def test_a_granted_call_reported_with_its_hold_settles_it(self) -> None:
        br, proxy, agent = self.client()
        async with br.guard(**CALL) as guard:
            self.assertEqual((guard.allowed, guard.reason, guard.held_usd), (True, None, WORST))
            assert guard.hold_id is not None and guard.expires_at is not None
            self.assertRegex(guard.hold_id, UUID)
            self.assertGreater(guard.expires_at, datetime.now(timezone.utc))
            self.assertEqual((await self.agent(agent))["held_usd"], WORST)
            self.assertIs(await guard.from_openai_chat("gpt-4o", USAGE), True)
            self.assertIs(guard.reported, True)
        self.assertEqual(proxy.requests("POST", "/events")[0].body["hold_id"], guard.hold_id)
        detail = await self.agent(agent)
        self.assertEqual((detail["held_usd"], detail["llm_calls"]), (0, 1))
        self.assertAlmostEqual(detail["total_cost_usd"], COST, places=9)
        self.assertEqual(deletes(proxy), [])
        self.assertEqual(self.errors, [])

    async def test_the_decorator_runs_coroutines_under_a_hold_and_not_when_refused(self) -> None:
        br, proxy, agent = self.client()

        @br.guarded(**CALL)
        async def ask(guard: AsyncGuard, prompt: str) -> str:
            await guard.llm_call(input_tokens=1000, output_tokens=500)
            return prompt.upper()

        self.assertEqual(await asyncio.gather(ask("a"), ask("b")), ["A", "B"])
        detail = await self.agent(agent)
        self.assertEqual((detail["held_usd"], detail["llm_calls"]), (0, 2))

        poor, _, poor_agent = self.client(cost_threshold_usd=0.01)
        ran: List[str] = []

        @poor.guarded(**CALL)
        async def refused(guard: AsyncGuard) -> str:
            ran.append("function")
            return "answer"

        self.assertIsNone(await refused())
        self.assertEqual(ran, [])
        self.assertEqual((await self.agent(poor_agent))["held_usd"], 0)
        self.assertEqual(self.errors, [])

    async def test_a_paused_refusal_pauses_the_client(self) -> None:
        br, proxy, agent = self.client()
        self.assertIs(await br.start(), True)
        await asyncio.to_thread(S.api.set_paused, agent, True)
        async with br.guard(**CALL) as guard:
            self.assertFalse(guard.allowed)
        self.assertEqual((guard.reason, br.paused, br.paused_reason), ("paused", True, "manual"))
        async with br.guard(**CALL) as again:
            self.assertEqual((again.allowed, again.reason), (False, "paused"))
        self.assertEqual(len(proxy.requests("POST", "/holds")), 1)
        self.assertEqual(self.errors, [])

    async def test_a_body_that_raises_or_does_not_report_releases_the_hold(self) -> None:
        br, proxy, agent = self.client()
        with self.assertRaises(Boom):
            async with br.guard(**CALL) as guard:
                self.assertEqual((await self.agent(agent))["held_usd"], WORST)
                raise Boom("the provider failed")
        self.assertEqual(deletes(proxy), ["/holds/" + str(guard.hold_id)])
        async with br.guard(**CALL) as quiet:
            self.assertTrue(quiet.allowed)
        self.assertEqual(len(deletes(proxy)), 2)
        self.assertEqual((await self.agent(agent))["held_usd"], 0)
        self.assertEqual(self.errors, [])

    async def test_fail_open_and_closed_on_a_dead_server(self) -> None:
        dead: dict = dict(api_key="k", agent_id="a", max_retries=0, on_error=self.errors.append)
        opened = AsyncBurnrate(base_url=dead_url(), **dead)
        closed = AsyncBurnrate(base_url=dead_url(), fail_mode="closed", **dead)
        async with opened.guard(**CALL) as guard:
            self.assertEqual((guard.allowed, guard.reason, guard.hold_id), (True, None, None))
        async with closed.guard(**CALL) as refused:
            self.assertEqual((refused.allowed, refused.reason), (False, "unreachable"))
            with self.assertRaises(RuntimeError):
                await refused.llm_call(1, 1)
        self.assertEqual([(e.operation, e.code) for e in self.errors], [("hold", "network_error")] * 2)


if __name__ == "__main__":
    unittest.main()

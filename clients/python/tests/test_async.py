"""AsyncBurnrate: the same behaviour, awaitable."""

from __future__ import annotations

import asyncio
import unittest
from typing import List

from burnrate import AsyncBurnrate, BurnrateError

from .support import ModuleServer, Proxy, dead_url, unique

S = ModuleServer()


def setUpModule() -> None:
    S.start("py-async")


def tearDownModule() -> None:
    S.stop()


class AsyncTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self.errors: List[BurnrateError] = []

    def client(self, agent: str, **kwargs: object) -> AsyncBurnrate:
        options: dict = dict(base_url=S.url, api_key=S.key, agent_id=agent, on_error=self.errors.append, retry_base_delay=0.01)
        options.update(kwargs)
        return AsyncBurnrate(**options)

    async def test_config_then_crossing_then_silence_then_resume(self) -> None:
        agent = unique("async")
        proxy = Proxy(S.url, lambda method, path, n: "forward")
        self.addCleanup(proxy.close)
        br = self.client(agent, base_url=proxy.url, cost_threshold_usd=0.01)
        self.assertEqual(proxy.requests("POST", "/config"), [])  # no I/O in the constructor
        self.assertIs(await br.configure(), True)
        self.assertEqual((await asyncio.to_thread(S.api.agent, agent))["config"]["cost_threshold_usd"], 0.01)

        self.assertIs(await br.llm_call("gpt-4o", 1000, 500), True)
        self.assertIs(await br.llm_call("gpt-4o", 1000, 500), False)
        self.assertTrue(br.paused)
        self.assertIs(await br.tool_call("search"), False)
        self.assertIs(await br.send({"event_type": "agent_end"}), False)
        self.assertEqual(len(proxy.requests("POST", "/events")), 2)
        self.assertEqual(len(proxy.requests("POST", "/config")), 1)

        async def operator_resumes() -> None:
            await asyncio.sleep(0.3)
            await asyncio.to_thread(S.api.set_paused, agent, False)

        resumer = asyncio.create_task(operator_resumes())
        self.assertIs(await br.wait_until_resumed(poll_interval=0.05, timeout=20), True)
        await resumer
        self.assertFalse(br.paused)
        self.assertIs(await br.end(), True)
        self.assertEqual(self.errors, [])

    async def test_the_config_is_sent_before_the_first_event_without_configure(self) -> None:
        agent = unique("asynccfg")
        br = self.client(agent, cost_threshold_usd=3.0)
        self.assertIs(await br.start(), True)
        self.assertEqual((await asyncio.to_thread(S.api.agent, agent))["config"]["cost_threshold_usd"], 3.0)

    async def test_concurrent_sends_are_all_counted(self) -> None:
        agent = unique("asyncmany")
        br = self.client(agent)
        results = await asyncio.wait_for(asyncio.gather(*(br.llm_call("gpt-4o", 10, 10) for _ in range(20))), 60)
        self.assertEqual(results, [True] * 20)
        self.assertEqual((await asyncio.to_thread(S.api.agent, agent))["llm_calls"], 20)

    async def test_wait_until_resumed_times_out(self) -> None:
        agent = unique("asyncwait")
        br = self.client(agent)
        await br.start()
        await asyncio.to_thread(S.api.set_paused, agent, True)
        self.assertIs(await br.refresh(), True)
        self.assertIs(await br.wait_until_resumed(poll_interval=0.05, timeout=0.2), False)

    async def test_fail_open_and_closed_on_a_dead_server(self) -> None:
        dead: dict = dict(api_key="k", agent_id="a", max_retries=0, on_error=self.errors.append)
        opened = AsyncBurnrate(base_url=dead_url(), **dead)
        closed = AsyncBurnrate(base_url=dead_url(), fail_mode="closed", **dead)
        self.assertIs(await opened.start(), True)
        self.assertIs(await closed.start(), False)
        self.assertEqual(len(self.errors), 2)


if __name__ == "__main__":
    unittest.main()

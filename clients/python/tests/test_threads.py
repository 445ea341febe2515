"""One client shared by many threads."""

from __future__ import annotations

import threading
import unittest
from typing import List

from burnrate import Burnrate, BurnrateError

from .support import ModuleServer, Proxy, unique

S = ModuleServer()

THREADS, PER_THREAD = 8, 10


def setUpModule() -> None:
    S.start("py-threads")


def tearDownModule() -> None:
    S.stop()


def run_threads(br: Burnrate) -> List[bool]:
    results: List[bool] = []
    lock = threading.Lock()
    barrier = threading.Barrier(THREADS)

    def work() -> None:
        barrier.wait(10)
        for _ in range(PER_THREAD):
            ok = br.llm_call("gpt-4o", 1000, 500)
            with lock:
                results.append(ok)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "threads did not finish within 60s"
    return results


class ThreadTest(unittest.TestCase):
    def test_a_shared_client_delivers_every_event_once(self) -> None:
        errors: List[BurnrateError] = []
        agent = unique("threads")
        br = Burnrate(base_url=S.url, api_key=S.key, agent_id=agent, on_error=errors.append)
        results = run_threads(br)
        self.assertEqual(results, [True] * THREADS * PER_THREAD)
        self.assertEqual(errors, [])
        S.api.drained()  # the events list trails the acknowledgements by the shipping interval
        detail = S.api.call("GET", "/agents/%s?limit=1000" % agent)[1]
        self.assertEqual(detail["llm_calls"], THREADS * PER_THREAD)
        self.assertEqual(len({e["event_id"] for e in detail["events"]}), THREADS * PER_THREAD)
        self.assertAlmostEqual(detail["total_cost_usd"], THREADS * PER_THREAD * 0.0075, places=9)

    def test_the_pause_reaches_every_thread(self) -> None:
        errors: List[BurnrateError] = []
        agent = unique("threadpause")
        proxy = Proxy(S.url, lambda method, path, n: "forward")
        self.addCleanup(proxy.close)
        # 0.05 USD: the 7th call (0.0525) crosses it.
        br = Burnrate(base_url=proxy.url, api_key=S.key, agent_id=agent, cost_threshold_usd=0.05, on_error=errors.append)
        results = run_threads(br)
        self.assertEqual(errors, [])
        self.assertTrue(br.paused)
        self.assertEqual(results.count(True), 6)  # exactly the calls under the budget
        sent = len(proxy.requests("POST", "/events"))
        self.assertEqual(S.api.agent(agent)["llm_calls"], sent)
        # After the crossing, at most the requests already in flight in other threads went out.
        self.assertLessEqual(sent, 7 + THREADS - 1)


if __name__ == "__main__":
    unittest.main()

"""A dead burnrate never crashes the agent: fail-open goes on, fail-closed stops;
invalid arguments fail fast at construction."""

from __future__ import annotations

import logging
import unittest
from typing import Any, List

from burnrate import Burnrate, BurnrateError

from .support import dead_url, unique


def make(fail_mode: Any = "open", **kwargs: Any) -> Burnrate:
    options: dict = dict(base_url=dead_url(), api_key="br_x_y", agent_id=unique("dead"), retry_base_delay=0.01, max_retries=1)
    options.update(kwargs)
    return Burnrate(fail_mode=fail_mode, **options)


class DeadServerTest(unittest.TestCase):
    def test_fail_open_returns_true_and_reports(self) -> None:
        errors: List[BurnrateError] = []
        br = make("open", on_error=errors.append)
        self.assertIs(br.llm_call("gpt-4o", 10, 10), True)
        self.assertIs(br.tool_call("search"), True)
        self.assertFalse(br.paused)
        self.assertEqual(len(errors), 2)
        err = errors[0]
        self.assertIsInstance(err, BurnrateError)
        self.assertIsNone(err.status)
        self.assertEqual((err.operation, err.code), ("event", "network_error"))
        self.assertTrue(err.retryable)
        self.assertEqual(err.attempts, 2)  # one try and max_retries=1
        self.assertIsInstance(err.__cause__, OSError)

    def test_fail_closed_returns_false_and_reports(self) -> None:
        errors: List[BurnrateError] = []
        br = make("closed", on_error=errors.append)
        self.assertIs(br.start(), False)
        self.assertEqual(len(errors), 1)
        self.assertFalse(br.paused)  # not paused by burnrate: the next send tries again
        self.assertIs(br.end(), False)
        self.assertEqual(len(errors), 2)

    def test_a_threshold_that_cannot_be_sent_does_not_raise(self) -> None:
        errors: List[BurnrateError] = []
        br = make("open", on_error=errors.append, cost_threshold_usd=1.0)
        self.assertEqual([e.operation for e in errors], ["config"])  # at construction
        self.assertIs(br.start(), True)
        self.assertEqual([e.operation for e in errors], ["config", "config", "event"])  # config again, then the event

    def test_without_on_error_the_burnrate_logger_warns(self) -> None:
        br = make("open")
        with self.assertLogs("burnrate", logging.WARNING) as logs:
            self.assertIs(br.start(), True)
        self.assertEqual(len(logs.records), 1)
        self.assertIn("POST /events", logs.output[0])

    def test_an_on_error_that_raises_is_logged_not_raised(self) -> None:
        def explode(err: BurnrateError) -> None:
            raise RuntimeError("callback bug")

        br = make("open", on_error=explode)
        with self.assertLogs("burnrate", logging.ERROR) as logs:
            self.assertIs(br.start(), True)
        self.assertIn("on_error", logs.output[0])

    def test_refresh_on_a_dead_server_keeps_the_state(self) -> None:
        errors: List[BurnrateError] = []
        br = make("open", on_error=errors.append)
        self.assertIs(br.refresh(), False)
        self.assertEqual([e.operation for e in errors], ["refresh"])
        self.assertIs(br.wait_until_resumed(poll_interval=0.01, timeout=1), True)


class ArgumentTest(unittest.TestCase):
    def test_invalid_arguments_raise_value_error(self) -> None:
        bad: List[dict] = [
            dict(fail_mode="maybe"),
            dict(base_url="localhost:8080"),
            dict(base_url="ftp://example.com"),
            dict(api_key=""),
            dict(agent_id=""),
            dict(agent_id="x" * 129),
            dict(agent_id="tab\there"),
            dict(cost_threshold_usd=-1),
            dict(cost_threshold_usd=float("nan")),
            dict(cost_threshold_usd="5"),
            dict(cost_threshold_usd=True),
            dict(cost_threshold_usd=1_000_001),
            dict(slack_webhook_url="https://x/" + "a" * 2048),
            dict(slack_webhook_url=""),
            dict(timeout=0),
            dict(max_retries=-1),
            dict(max_retries=1.5),
            dict(on_error="print"),
            dict(retry_base_delay=-0.1),
        ]
        for kwargs in bad:
            options: dict = dict(base_url="http://127.0.0.1:9", api_key="k", agent_id="a")
            options.update(kwargs)
            with self.subTest(**{k: repr(v) for k, v in kwargs.items()}), self.assertRaises(ValueError):
                Burnrate(**options)

    def test_valid_arguments_do_no_io_without_a_threshold(self) -> None:
        br = Burnrate(base_url="http://127.0.0.1:9/", api_key="br_secret_value", agent_id="a", fail_mode="closed")
        self.assertEqual((br.agent_id, br.fail_mode, br.paused), ("a", "closed", False))
        self.assertNotIn("br_secret_value", repr(br))

    def test_events_are_checked(self) -> None:
        br = Burnrate(base_url="http://127.0.0.1:9", api_key="k", agent_id="a")
        with self.assertRaises(TypeError):
            br.send("llm_call")  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            br.send({"event_type": "agent_start", "agent_id": "someone-else"})


if __name__ == "__main__":
    unittest.main()

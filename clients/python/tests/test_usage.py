"""Usage helpers on SDK-shaped objects: the token counts, and the cost burnrate computes."""

from __future__ import annotations

import unittest
from types import SimpleNamespace
from typing import Any, Dict, List, Optional

import burnrate
from burnrate import Burnrate, BurnrateError

from .support import TEST_MODEL, TEST_PRICES, ModuleServer, unique

S = ModuleServer()


def setUpModule() -> None:
    S.start("py-usage")


def tearDownModule() -> None:
    S.stop()


# Shaped like the official SDKs' pydantic models: attributes with the official names.
class PromptTokensDetails:
    def __init__(self, cached_tokens: Optional[int] = None, audio_tokens: Optional[int] = None) -> None:
        self.cached_tokens = cached_tokens
        self.audio_tokens = audio_tokens


class CompletionUsage:  # openai.types.CompletionUsage
    def __init__(self, prompt_tokens: int, completion_tokens: int, prompt_tokens_details: Any = None) -> None:
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.total_tokens = prompt_tokens + completion_tokens
        self.prompt_tokens_details = prompt_tokens_details
        self.completion_tokens_details = SimpleNamespace(reasoning_tokens=100, audio_tokens=None)


class AnthropicUsage:  # anthropic.types.Usage
    def __init__(
        self,
        input_tokens: int,
        output_tokens: int,
        cache_creation_input_tokens: Optional[int],
        cache_read_input_tokens: Optional[int],
    ) -> None:
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cache_creation_input_tokens = cache_creation_input_tokens
        self.cache_read_input_tokens = cache_read_input_tokens
        self.cache_creation = SimpleNamespace(ephemeral_5m_input_tokens=cache_creation_input_tokens, ephemeral_1h_input_tokens=0)
        self.server_tool_use = None
        self.service_tier = "standard"


OPENAI_CHAT = CompletionUsage(1000, 500, PromptTokensDetails(cached_tokens=400))
OPENAI_RESPONSES = SimpleNamespace(
    input_tokens=2000,
    input_tokens_details=SimpleNamespace(cached_tokens=1000),
    output_tokens=300,
    output_tokens_details=SimpleNamespace(reasoning_tokens=120),
    total_tokens=2300,
)
ANTHROPIC = AnthropicUsage(input_tokens=100, output_tokens=50, cache_creation_input_tokens=200, cache_read_input_tokens=1000)


def tokens(event: Dict[str, Any]) -> tuple:
    return (event["input_tokens"], event["output_tokens"], event.get("cache_read_tokens", 0), event.get("cache_write_tokens", 0))


def price(inp: int, out: int, read: int = 0, write: int = 0) -> float:
    """The test model's cost: cache tokens are parts of input, priced at their own rates."""
    p = TEST_PRICES
    return ((inp - read - write) * p["input"] + read * p["cache_read"] + write * p["cache_write"] + out * p["output"]) / 1e6


class ConverterTest(unittest.TestCase):
    def test_openai_chat(self) -> None:
        event = burnrate.from_openai_chat("gpt-4o", OPENAI_CHAT)
        self.assertEqual(event["event_type"], "llm_call")
        self.assertEqual(event["model"], "gpt-4o")
        self.assertEqual(tokens(event), (1000, 500, 400, 0))

    def test_openai_chat_as_dict_and_with_missing_details(self) -> None:
        as_dict = {"prompt_tokens": 1000, "completion_tokens": 500, "prompt_tokens_details": {"cached_tokens": 400}}
        self.assertEqual(tokens(burnrate.from_openai_chat("m", as_dict)), (1000, 500, 400, 0))
        self.assertEqual(tokens(burnrate.from_openai_chat("m", CompletionUsage(7, 3, None))), (7, 3, 0, 0))
        self.assertEqual(tokens(burnrate.from_openai_chat("m", CompletionUsage(7, 3, PromptTokensDetails(None)))), (7, 3, 0, 0))
        self.assertEqual(tokens(burnrate.from_openai_chat("m", None)), (0, 0, 0, 0))

    def test_openai_responses(self) -> None:
        self.assertEqual(tokens(burnrate.from_openai_responses("gpt-4o", OPENAI_RESPONSES)), (2000, 300, 1000, 0))
        as_dict = {"input_tokens": 20, "output_tokens": 3, "input_tokens_details": None}
        self.assertEqual(tokens(burnrate.from_openai_responses("m", as_dict)), (20, 3, 0, 0))

    def test_anthropic_input_gets_the_cache_tokens_added(self) -> None:
        self.assertEqual(tokens(burnrate.from_anthropic("claude", ANTHROPIC)), (1300, 50, 1000, 200))
        older = AnthropicUsage(input_tokens=12, output_tokens=5, cache_creation_input_tokens=None, cache_read_input_tokens=None)
        self.assertEqual(tokens(burnrate.from_anthropic("claude", older)), (12, 5, 0, 0))
        as_dict = {"input_tokens": 1, "output_tokens": 2, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 4}
        self.assertEqual(tokens(burnrate.from_anthropic("claude", as_dict)), (8, 2, 4, 3))

    def test_extra_fields_and_builders(self) -> None:
        event = burnrate.from_anthropic("claude", ANTHROPIC, metadata={"step": "plan"})
        self.assertEqual(event["metadata"], {"step": "plan"})
        self.assertEqual(burnrate.tool_call_event("search"), {"event_type": "tool_call", "tool_name": "search"})
        self.assertEqual(burnrate.start_event({"run": 1}), {"event_type": "agent_start", "metadata": {"run": 1}})
        self.assertEqual(burnrate.end_event(), {"event_type": "agent_end"})

    def test_a_non_integer_count_is_a_type_error(self) -> None:
        with self.assertRaises(TypeError):
            burnrate.from_openai_chat("m", {"prompt_tokens": "12"})


class ServerCostTest(unittest.TestCase):
    def setUp(self) -> None:
        self.errors: List[BurnrateError] = []
        self.agent = unique("usage")
        self.br = Burnrate(base_url=S.url, api_key=S.key, agent_id=self.agent, on_error=self.errors.append)

    def last_event(self) -> Dict[str, Any]:
        """The agent's one llm_call event."""
        (event,) = [e for e in S.api.agent(self.agent)["events"] if e["event_type"] == "llm_call"]
        return event

    def check(self, expected_tokens: tuple) -> None:
        self.assertEqual(self.errors, [])
        stored = self.last_event()
        self.assertEqual(stored["model"], TEST_MODEL)
        self.assertEqual(tokens(stored), expected_tokens)
        self.assertAlmostEqual(stored["cost_usd"], price(*expected_tokens), places=12)

    def test_openai_chat_cost(self) -> None:
        self.assertIs(self.br.from_openai_chat(TEST_MODEL, OPENAI_CHAT), True)
        self.check((1000, 500, 400, 0))
        self.assertAlmostEqual(self.last_event()["cost_usd"], 0.0054, places=12)

    def test_openai_responses_cost(self) -> None:
        self.assertIs(self.br.from_openai_responses(TEST_MODEL, OPENAI_RESPONSES), True)
        self.check((2000, 300, 1000, 0))
        self.assertAlmostEqual(self.last_event()["cost_usd"], 0.0049, places=12)

    def test_anthropic_cost(self) -> None:
        self.assertIs(self.br.from_anthropic(TEST_MODEL, ANTHROPIC, metadata={"turn": 3}), True)
        self.check((1300, 50, 1000, 200))
        self.assertAlmostEqual(self.last_event()["cost_usd"], 0.0019, places=12)
        self.assertEqual(self.last_event()["metadata"], {"turn": 3})

    def test_llm_call_tool_call_start_end(self) -> None:
        self.assertIs(self.br.start({"task": "t1"}), True)
        self.assertIs(self.br.llm_call(TEST_MODEL, 100, 10, cache_read_tokens=40, cache_write_tokens=20), True)
        self.check((100, 10, 40, 20))
        self.assertIs(self.br.tool_call("search", {"q": "x"}), True)
        self.assertIs(self.br.end(), True)
        by_type = {e["event_type"]: e for e in S.api.agent(self.agent)["events"]}
        self.assertEqual(sorted(by_type), ["agent_end", "agent_start", "llm_call", "tool_call"])
        self.assertEqual(by_type["tool_call"]["tool_name"], "search")
        self.assertEqual(by_type["tool_call"]["metadata"], {"q": "x"})
        self.assertEqual(by_type["agent_start"]["metadata"], {"task": "t1"})
        self.assertEqual([by_type[t]["cost_usd"] for t in ("agent_start", "tool_call", "agent_end")], [0, 0, 0])

if __name__ == "__main__":
    unittest.main()

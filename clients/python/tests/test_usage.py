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
    """The SDK's usage object goes as it is (as JSON); the server reads the quantities."""

    def test_openai_chat_and_responses_name_their_flavor(self) -> None:
        event = burnrate.from_openai_chat("gpt-4o", OPENAI_CHAT)
        self.assertEqual(
            event,
            {
                "event_type": "llm_call",
                "model": "gpt-4o",
                "provider": "openai",
                "api_flavor": "chat",
                "usage": {
                    "prompt_tokens": 1000,
                    "completion_tokens": 500,
                    "total_tokens": 1500,
                    "prompt_tokens_details": {"cached_tokens": 400},
                    "completion_tokens_details": {"reasoning_tokens": 100},
                },
            },
        )
        responses = burnrate.from_openai_responses("o4-mini", OPENAI_RESPONSES)
        self.assertEqual((responses["provider"], responses["api_flavor"]), ("openai", "responses"))
        self.assertEqual(responses["usage"]["input_tokens_details"], {"cached_tokens": 1000})

    def test_anthropic_keeps_what_a_mapping_dropped(self) -> None:
        event = burnrate.from_anthropic("claude", ANTHROPIC, metadata={"step": "plan"})
        self.assertEqual(event["provider"], "anthropic")
        self.assertNotIn("api_flavor", event)
        self.assertEqual(event["usage"]["cache_creation"], {"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 0})
        self.assertEqual(event["metadata"], {"step": "plan"})

    def test_dicts_pydantic_style_models_and_any_provider(self) -> None:
        class Model:  # a pydantic model's interface
            def model_dump(self, exclude_none: bool = False) -> Dict[str, Any]:
                return {"promptTokenCount": 10, "candidatesTokenCount": 2}

        event = burnrate.from_usage("google", "gemini-2.5-flash", Model())
        self.assertEqual(event["usage"], {"promptTokenCount": 10, "candidatesTokenCount": 2})
        as_dict = {"prompt_tokens": 7, "completion_tokens": 3, "prompt_tokens_details": None}
        self.assertEqual(burnrate.from_openai_chat("m", as_dict)["usage"], {"prompt_tokens": 7, "completion_tokens": 3})

    def test_none_usage_is_a_clear_type_error(self) -> None:
        with self.assertRaisesRegex(TypeError, "usage object is needed, got None"):
            burnrate.from_openai_chat("m", None)
        with self.assertRaises(TypeError):
            burnrate.from_anthropic("m", 12)

    def test_builders(self) -> None:
        self.assertEqual(burnrate.tool_call_event("search"), {"event_type": "tool_call", "tool_name": "search"})
        self.assertEqual(burnrate.start_event({"run": 1}), {"event_type": "agent_start", "metadata": {"run": 1}})
        self.assertEqual(burnrate.end_event(), {"event_type": "agent_end"})


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

    def test_what_a_mapping_dropped_is_stored(self) -> None:
        """1-hour cache writes and web searches reach the server; what the prices lack is shown."""
        usage = {
            "input_tokens": 100,
            "output_tokens": 50,
            "cache_creation_input_tokens": 300,
            "cache_read_input_tokens": 1000,
            "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
            "server_tool_use": {"web_search_requests": 3},
        }
        self.assertIs(self.br.from_anthropic(TEST_MODEL, usage), True)
        self.check((1400, 50, 1000, 300))
        stored = self.last_event()
        self.assertEqual(stored["quantities"]["cache_write_1h_tokens"], 200)
        self.assertEqual(stored["quantities"]["web_searches"], 3)
        # The test model's prices have no web search price: stored, shown, not charged.
        self.assertEqual(stored["unpriced_quantities"], ["web_searches"])

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

"""burnrate: report an AI agent's LLM spend to a burnrate server and stop when it says so.

    from burnrate import Burnrate
    br = Burnrate(base_url="http://localhost:8080", api_key=KEY, agent_id="researcher",
                  cost_threshold_usd=5.0)
    if not br.from_openai_chat("gpt-4o", response.usage):
        ...  # over budget: stop
"""

from ._buffer import Buffer
from ._periods import CalendarBudget, Period, PeriodBudget, RollingBudget
from ._version import __version__
from .aio import AsyncBurnrate, AsyncGuard
from .client import Burnrate, FailMode, Guard, OnAlert, OnError
from .errors import BurnrateError
from .usage import (
    end_event,
    from_anthropic,
    from_usage,
    from_openai_chat,
    from_openai_responses,
    llm_call_event,
    start_event,
    tool_call_event,
)

__all__ = [
    "AsyncBurnrate",
    "AsyncGuard",
    "Buffer",
    "Burnrate",
    "BurnrateError",
    "CalendarBudget",
    "FailMode",
    "Guard",
    "OnAlert",
    "OnError",
    "Period",
    "PeriodBudget",
    "RollingBudget",
    "__version__",
    "end_event",
    "from_anthropic",
    "from_usage",
    "from_openai_chat",
    "from_openai_responses",
    "llm_call_event",
    "start_event",
    "tool_call_event",
]

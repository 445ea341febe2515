"""Period budgets: the start-up config's, checked as the server checks them, and the periods an
answer shows (docs/api.md in the burnrate repository, "Period budgets")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, TypedDict, Union

MAX_PERIOD_BUDGETS = 4
MAX_PERIOD_LIMIT_USD = 1_000_000
_CALENDAR_PERIODS = ("day", "week", "month")
_CALENDAR_FIELDS = frozenset({"period", "limit_usd", "time_zone", "week_starts", "month_starts_on"})
_ROLLING_FIELDS = frozenset({"window_days", "limit_usd"})


class _CalendarBudgetFields(TypedDict):
    period: Literal["day", "week", "month"]
    limit_usd: float


class CalendarBudget(_CalendarBudgetFields, total=False):
    """A budget over a calendar period in a time zone, each beginning at local midnight:
    ``{"period": "month", "limit_usd": 200, "time_zone": "Europe/Paris"}``. ``time_zone`` is an
    IANA name (default "UTC"), ``week_starts`` "monday" (default) or "sunday", ``month_starts_on``
    the day (1 to 28, default 1) a month begins on. A pause by it ends when the next period begins."""

    time_zone: str
    week_starts: Literal["monday", "sunday"]
    month_starts_on: int


class RollingBudget(TypedDict):
    """A budget over a rolling window of whole days (1 to 31), named ``window_<n>d``:
    ``{"window_days": 30, "limit_usd": 250}``. A pause by it ends once its spend is back within
    the limit."""

    window_days: int
    limit_usd: float


PeriodBudget = Union[CalendarBudget, RollingBudget]


@dataclass(frozen=True)
class Period:
    """A period of the agent's period budgets, as an answer shows it."""

    #: "day", "week", "month" or "window_<n>d".
    period: str
    spent_usd: float
    limit_usd: float
    #: The limit minus the spend (negative when over it).
    remaining_usd: float
    #: The period's first instant (a rolling window's first whole UTC hour).
    starts_at: datetime
    #: A calendar period's end, where the next one begins; None for a rolling window.
    ends_at: Optional[datetime]
    #: When the limit is reached at the last hour's spend rate, if before the period ends; else None.
    projected_exhaustion_at: Optional[datetime]


def _int_in(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _budget_body(budget: Any, at: str) -> Dict[str, Any]:
    if not isinstance(budget, Mapping):
        raise ValueError("%s must be a mapping: {period, limit_usd, ...} or {window_days, limit_usd}, got %r" % (at, budget))
    rolling = "window_days" in budget
    unknown = sorted(str(k) for k in budget if k not in (_ROLLING_FIELDS if rolling else _CALENDAR_FIELDS))
    if unknown:
        raise ValueError("%s (%s) has unknown fields: %s" % (at, "a rolling window" if rolling else "a calendar period", ", ".join(unknown)))
    limit = budget.get("limit_usd")
    if (
        isinstance(limit, bool)
        or not isinstance(limit, (int, float))
        or not math.isfinite(limit)
        or not 0 < limit <= MAX_PERIOD_LIMIT_USD
    ):
        raise ValueError("%s limit_usd must be a number above 0 and at most %d, got %r" % (at, MAX_PERIOD_LIMIT_USD, limit))
    if rolling:
        if not _int_in(budget["window_days"], 1, 31):
            raise ValueError("%s window_days must be an integer from 1 to 31, got %r" % (at, budget["window_days"]))
        return {"window_days": budget["window_days"], "limit_usd": limit}
    if budget.get("period") not in _CALENDAR_PERIODS:
        raise ValueError('%s period must be "day", "week" or "month" (or give window_days), got %r' % (at, budget.get("period")))
    body: Dict[str, Any] = {"period": budget["period"], "limit_usd": limit}
    # Whether the zone exists only the server can tell: its time zone data is the one that counts.
    if "time_zone" in budget:
        if not isinstance(budget["time_zone"], str) or not budget["time_zone"]:
            raise ValueError("%s time_zone must be an IANA time zone name, got %r" % (at, budget["time_zone"]))
        body["time_zone"] = budget["time_zone"]
    if "week_starts" in budget:
        if budget["week_starts"] not in ("monday", "sunday"):
            raise ValueError('%s week_starts must be "monday" or "sunday", got %r' % (at, budget["week_starts"]))
        body["week_starts"] = budget["week_starts"]
    if "month_starts_on" in budget:
        if not _int_in(budget["month_starts_on"], 1, 28):
            raise ValueError("%s month_starts_on must be an integer from 1 to 28, got %r" % (at, budget["month_starts_on"]))
        body["month_starts_on"] = budget["month_starts_on"]
    return body


def period_budgets_body(budgets: Sequence[PeriodBudget]) -> List[Dict[str, Any]]:
    """The ``period_budgets`` of POST /config (``[]`` removes the agent's). Raises ValueError
    for what the server would refuse, but for an unknown time zone name."""
    if not isinstance(budgets, (list, tuple)) or len(budgets) > MAX_PERIOD_BUDGETS:
        raise ValueError("period_budgets must be a list of at most %d period budgets, got %r" % (MAX_PERIOD_BUDGETS, budgets))
    bodies: List[Dict[str, Any]] = []
    names: List[str] = []
    for i, budget in enumerate(budgets):
        body = _budget_body(budget, "period_budgets[%d]" % i)
        name = "window_%dd" % body["window_days"] if "window_days" in body else str(body["period"])
        if name in names:
            raise ValueError("period_budgets[%d] repeats the period %r: one budget per period" % (i, name))
        names.append(name)
        bodies.append(body)
    return bodies


def _time(value: Any) -> Optional[datetime]:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else None


def periods_of(periods: Any) -> List[Period]:
    """The periods of an answer; [] when it has none (a burnrate older than period budgets)."""
    if not isinstance(periods, list):
        return []
    return [
        Period(
            period=p["period"],
            spent_usd=p["spent_usd"],
            limit_usd=p["limit_usd"],
            remaining_usd=p["remaining_usd"],
            starts_at=datetime.fromisoformat(p["starts_at"].replace("Z", "+00:00")),
            ends_at=_time(p.get("ends_at")),
            projected_exhaustion_at=_time(p.get("projected_exhaustion_at")),
        )
        for p in periods
        if isinstance(p, dict)
    ]

"""Event builders, and llm_call events that carry a provider SDK's usage object.

Every function here is pure: it returns the event dict (the wire fields of POST /events
without agent_id and event_id, which the client adds). A usage object goes to burnrate as it
is (as JSON): the server reads every quantity in it with the price library's own extractors
and prices each (audio tokens, cache writes by duration, reasoning, web searches, ...), so
nothing is mapped, or dropped, here. ``usage`` may be the SDK's object (a pydantic model), a
plain dict (e.g. raw JSON), or any object with attributes; None, which the SDKs allow, is a
TypeError (a streamed response reports usage only when asked to).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

Event = Dict[str, Any]


def llm_call_event(
    model: str,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    **extra: Any,
) -> Event:
    """An llm_call event. ``input_tokens`` includes the cached ones (cache_read_tokens and
    cache_write_tokens are parts of it). ``extra`` adds other event fields, e.g. metadata."""
    event: Event = {
        "event_type": "llm_call",
        "model": model,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
    }
    # Zero is the server's default; leaving them out keeps the body minimal.
    if cache_read_tokens:
        event["cache_read_tokens"] = cache_read_tokens
    if cache_write_tokens:
        event["cache_write_tokens"] = cache_write_tokens
    event.update(extra)
    return event


def tool_call_event(tool_name: str, metadata: Optional[Mapping[str, Any]] = None) -> Event:
    return _with_metadata({"event_type": "tool_call", "tool_name": tool_name}, metadata)


def start_event(metadata: Optional[Mapping[str, Any]] = None) -> Event:
    return _with_metadata({"event_type": "agent_start"}, metadata)


def end_event(metadata: Optional[Mapping[str, Any]] = None) -> Event:
    return _with_metadata({"event_type": "agent_end"}, metadata)


def _with_metadata(event: Event, metadata: Optional[Mapping[str, Any]]) -> Event:
    if metadata is not None:
        event["metadata"] = dict(metadata)
    return event


def _as_json(value: Any, path: str) -> Any:
    """The JSON value of an SDK object: pydantic models, mappings, sequences, attributes."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return _as_json(dump(exclude_none=True), path)
    if isinstance(value, Mapping):
        return {str(k): _as_json(v, "%s.%s" % (path, k)) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_as_json(v, "%s[%d]" % (path, i)) for i, v in enumerate(value)]
    if hasattr(value, "__dict__"):
        return {k: _as_json(v, "%s.%s" % (path, k)) for k, v in vars(value).items() if not k.startswith("_") and v is not None}
    raise TypeError("%s is not JSON data: %r" % (path, value))


def from_usage(provider: str, model: str, usage: Any, api_flavor: Optional[str] = None, **extra: Any) -> Event:
    """The llm_call of a provider's usage object, for any provider the price library knows
    (``provider``: openai, anthropic, google, ...; ``api_flavor`` where it has several)."""
    if usage is None:
        raise TypeError("the response's usage object is needed, got None (a streamed response reports usage only when asked to)")
    body = _as_json(usage, "usage")
    if not isinstance(body, dict):
        raise TypeError("usage must be the provider's usage object, got %r" % (usage,))
    event: Event = {"event_type": "llm_call", "model": model, "provider": provider, "usage": body}
    if api_flavor is not None:
        event["api_flavor"] = api_flavor
    event.update(extra)
    return event


def from_openai_chat(model: str, usage: Any, **extra: Any) -> Event:
    """OpenAI Chat Completions ``completion.usage`` (CompletionUsage), as it is."""
    return from_usage("openai", model, usage, api_flavor="chat", **extra)


def from_openai_responses(model: str, usage: Any, **extra: Any) -> Event:
    """OpenAI Responses API ``response.usage`` (ResponseUsage), as it is."""
    return from_usage("openai", model, usage, api_flavor="responses", **extra)


def from_anthropic(model: str, usage: Any, **extra: Any) -> Event:
    """Anthropic Messages ``message.usage`` (Usage), as it is."""
    return from_usage("anthropic", model, usage, **extra)

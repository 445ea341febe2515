"""Event builders and converters from the usage objects of the OpenAI and Anthropic SDKs.

Every function here is pure: it returns the event dict (the wire fields of POST /events
without agent_id and event_id, which the client adds). ``usage`` may be the SDK's object
(pydantic models, read by attribute), a plain dict (e.g. ``response.model_dump()["usage"]``
or raw JSON), or None; missing or None counts are 0.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

Event = Dict[str, Any]


def _field(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    value = getattr(obj, name, None)
    if value is None and isinstance(obj, Mapping):
        value = obj.get(name)
    return value


def _tokens(value: Any, name: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError("usage field %s must be an integer, not a bool" % name)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise TypeError("usage field %s must be an integer, got %r" % (name, value))


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


def from_openai_chat(model: str, usage: Any, **extra: Any) -> Event:
    """OpenAI Chat Completions ``response.usage`` (CompletionUsage).

    prompt_tokens already includes prompt_tokens_details.cached_tokens, as burnrate's
    input_tokens includes cache_read_tokens; completion_tokens includes reasoning tokens.
    """
    prompt = _tokens(_field(usage, "prompt_tokens"), "prompt_tokens")
    completion = _tokens(_field(usage, "completion_tokens"), "completion_tokens")
    cached = _tokens(_field(_field(usage, "prompt_tokens_details"), "cached_tokens"), "cached_tokens")
    return llm_call_event(model, prompt, completion, cache_read_tokens=min(cached, prompt), **extra)


def from_openai_responses(model: str, usage: Any, **extra: Any) -> Event:
    """OpenAI Responses API ``response.usage`` (ResponseUsage): input_tokens includes
    input_tokens_details.cached_tokens; output_tokens includes reasoning tokens."""
    inp = _tokens(_field(usage, "input_tokens"), "input_tokens")
    out = _tokens(_field(usage, "output_tokens"), "output_tokens")
    cached = _tokens(_field(_field(usage, "input_tokens_details"), "cached_tokens"), "cached_tokens")
    return llm_call_event(model, inp, out, cache_read_tokens=min(cached, inp), **extra)


def from_anthropic(model: str, usage: Any, **extra: Any) -> Event:
    """Anthropic Messages ``message.usage``.

    Anthropic's input_tokens counts only the uncached input; the tokens written to and
    read from the prompt cache are reported beside it. burnrate's input_tokens is the
    whole input, so the three are added.
    """
    uncached = _tokens(_field(usage, "input_tokens"), "input_tokens")
    written = _tokens(_field(usage, "cache_creation_input_tokens"), "cache_creation_input_tokens")
    read = _tokens(_field(usage, "cache_read_input_tokens"), "cache_read_input_tokens")
    out = _tokens(_field(usage, "output_tokens"), "output_tokens")
    return llm_call_event(
        model,
        uncached + written + read,
        out,
        cache_read_tokens=read,
        cache_write_tokens=written,
        **extra,
    )

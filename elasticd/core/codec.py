"""Events and actions as plain data (dicts of JSON types) and back, for the event log.

Pure, like `record.py`: the core says what an event or an action is as data; where it is
written is the daemon's business. Every event type round-trips exactly (times are floats,
which JSON keeps exactly), so a log read back feeds the core the very events it had.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any

from elastic_protocol.jobspec import JobSpec
from elasticd.core.actions import Action
from elasticd.core.events import EVENT_TYPES, Event

_BY_NAME: dict[str, type[Any]] = {t.__name__: t for t in EVENT_TYPES}


class CodecError(ValueError):
    """A record that is not an event this core knows (another version's log, a damaged line)."""


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, JobSpec):
        return value.model_dump(mode="json", exclude_defaults=True)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def event_to_dict(event: Event) -> dict[str, Any]:
    """{"type": name, "cause": ..., field: value, ...}"""
    out: dict[str, Any] = {"type": type(event).__name__, "cause": event.cause.value}
    for f in dataclasses.fields(event):
        out[f.name] = _plain(getattr(event, f.name))
    return out


def event_from_dict(data: dict[str, Any]) -> Event:
    name = data.get("type")
    cls = _BY_NAME.get(name) if isinstance(name, str) else None
    if cls is None:
        raise CodecError(f"unknown event type {name!r}")
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING:
                raise CodecError(f"{name}: missing field {f.name!r}")
            continue
        v = data[f.name]
        if f.name == "spec":
            v = JobSpec.model_validate(v)
        elif isinstance(v, list):
            v = tuple(v)
        kwargs[f.name] = v
    try:
        event: Event = cls(**kwargs)
    except TypeError as exc:
        raise CodecError(f"{name}: {exc}") from None
    return event


def action_to_dict(action: Action) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type(action).__name__}
    for f in dataclasses.fields(action):
        out[f.name] = _plain(getattr(action, f.name))
    return out

"""A quicker constructor for frozen, slotted dataclasses: the core's events and actions and
the policies' views and decisions.

A frozen dataclass's own __init__ sets every field through object.__setattr__ (its own
__setattr__ refuses), which is most of what making one costs: a long simulation makes
millions of them (a view per changed job per pass, several events and actions per
resize), and those constructors were a sixth of its run time. The __init__ made here sets
each field through its slot's descriptor instead: the same parameters, defaults and
__post_init__, the instance still frozen, in half the time.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from typing import Any, TypeVar

T = TypeVar("T")


def fast_init(cls: type[T]) -> type[T]:
    """Give `cls` (a frozen dataclass with slots) the quicker __init__; returns `cls`.

    Raises TypeError for a class it cannot serve exactly as dataclasses does (not frozen,
    no slots, a default_factory), and checks that the signature is the dataclass's own."""
    c: Any = cls  # a dataclass, whose __init__ is replaced: beyond what types say
    params = getattr(c, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in c.__dict__:
        raise TypeError(f"{c.__name__}: not a frozen dataclass with slots")
    old = inspect.signature(c.__init__)
    scope: dict[str, Any] = {}
    args: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(c):
        if f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: default_factory is not supported")
        setter = f"_set_{f.name}"
        slot = next((b.__dict__[f.name] for b in cls.__mro__ if f.name in b.__dict__), None)
        if not isinstance(slot, types.MemberDescriptorType):
            raise TypeError(f"{cls.__name__}.{f.name}: not a slot")
        scope[setter] = slot.__set__
        if f.init:
            if f.default is dataclasses.MISSING:
                args.append(f.name)
            else:
                scope[f"_default_{f.name}"] = f.default
                args.append(f"{f.name}=_default_{f.name}")
            body.append(f"    {setter}(self, {f.name})")
        elif f.default is not dataclasses.MISSING:
            scope[f"_default_{f.name}"] = f.default
            body.append(f"    {setter}(self, _default_{f.name})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    source = f"def __init__(self, {', '.join(args)}) -> None:\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, scope)  # noqa: S102  (made from the class's own field names only)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = c.__init__.__doc__
    new = inspect.signature(init)
    if [(p.name, p.default, p.kind) for p in new.parameters.values()] != [
        (p.name, p.default, p.kind) for p in old.parameters.values()
    ]:
        raise TypeError(f"{cls.__name__}: made {new}, the dataclass has {old}")
    c.__init__ = init
    return cls

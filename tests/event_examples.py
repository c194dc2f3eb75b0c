"""One example of every event class of the ``Event`` union, built from its fields' types.

Built, not listed: an event added to the union gets an example here without an edit, so the
tests that feed every dispatcher one of each cover it the day it is added.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union

from pydantic import BaseModel

from app.kernel import events as ev


def union_classes() -> list[type[ev.EventBase]]:
    """The classes of the ``Event`` union, in its order."""
    return list(typing.get_args(typing.get_args(ev.Event)[0]))


def _value(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _value(typing.get_args(annotation)[0])
    if origin is Literal:
        return typing.get_args(annotation)[0]
    if origin in (Union, types.UnionType):
        arms = [arm for arm in typing.get_args(annotation) if arm is not type(None)]
        return _value(arms[0])
    if origin in (list, tuple, set, frozenset):
        return []
    if origin is dict:
        return {}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return example(annotation)
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        hints = typing.get_type_hints(annotation)
        return {f.name: _value(hints[f.name]) for f in dataclasses.fields(annotation)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    return {str: "x", int: 1, float: 1.0, bool: False}.get(annotation, None)


def example(cls: type[BaseModel]) -> Any:
    """An instance of ``cls`` with its required fields filled (first Literal value, 1, "x", ...)."""
    fields = {name: _value(field.annotation) for name, field in cls.model_fields.items() if field.is_required()}
    return cls.model_validate(fields)


def one_of_each() -> list[ev.EventBase]:
    return [example(cls) for cls in union_classes()]

"""The models a headless run builds give each instance a list of its own, without pydantic asking the
builtin ``list`` for its signature (it does, for a ``default_factory``, to see whether the factory
takes the data): that parses the builtin's text signature with tokenize's patterns, compiled for
it alone, a few ms of every run."""

from __future__ import annotations

import inspect
from typing import Any, Callable

import pytest
from pydantic import BaseModel
from pydantic._internal import _typing_extra

from app.kernel.events import PermissionDenial, ResultEvent
from app.kernel.messages import ToolResultBlock
from app.mcp.settings import McpServerConfig
from app.wiring.config import PermissionRules, Settings

MODELS: list[tuple[type[BaseModel], Callable[[], BaseModel]]] = [
    (Settings, Settings),
    (PermissionRules, PermissionRules),
    (McpServerConfig, lambda: McpServerConfig(command="server")),
    (ToolResultBlock, lambda: ToolResultBlock(tool_use_id="call_1", content="ok")),
    (ResultEvent, lambda: ResultEvent(stop_reason="end_turn", text="", steps=1)),
]


@pytest.mark.parametrize(("model", "make"), MODELS, ids=[model.__name__ for model, _ in MODELS])
def test_each_instance_has_its_own_lists(model: type[BaseModel], make: Callable[[], BaseModel]) -> None:
    names = [name for name, field in model.model_fields.items() if field.default == []]
    assert names, f"{model.__name__} has no list default left to check"
    first, second = make(), make()
    for name in names:
        kept: list[Any] = getattr(first, name)
        kept.append(PermissionDenial(tool_name="run_bash", tool_use_id="c1") if model is ResultEvent else "x")
        assert getattr(second, name) == [] and getattr(make(), name) == [], name


def test_building_them_asks_no_builtin_list_for_its_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[object] = []
    real = inspect.signature

    def signature(obj: Any, *args: Any, **kwargs: Any) -> inspect.Signature:
        asked.append(obj)
        return real(obj, *args, **kwargs)

    # pydantic asks through its own import of inspect.signature (_typing_extra.signature_no_eval).
    monkeypatch.setattr(_typing_extra, "signature", signature)
    for model, _make in MODELS:
        rebuilt = type(model.__name__, (model,), {"__module__": model.__module__})  # built afresh, here
        assert isinstance(rebuilt, type) and issubclass(rebuilt, BaseModel)
        rebuilt.model_rebuild(force=True)
    assert asked, "pydantic no longer asks factories for their signature here: this test looks in the wrong place"
    assert list not in asked

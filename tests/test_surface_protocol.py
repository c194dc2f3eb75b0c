"""ARCHITECTURE.md: the real session, its process client and the test fake all implement
``SessionSurface``, and a test fails when they drift: the same parameters, of the same
kinds, with the same types, returning the same type (names alone let a fake take ``Any``
where the session takes an event, and a surface tested against it learns nothing)."""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Callable
from typing import Any

import pytest

from app.kernel import commands, events, protocol
from app.kernel.envelope import EventEnvelope
from app.kernel.protocol import SessionSurface
from app.session.agent_session import AgentSession
from app.session.process import SessionProcess
from snapshot_apps.fake_agent import FakeSession

CALLS = ("submit", "attach", "subscribe", "snapshot")
# What annotations name under `if TYPE_CHECKING:` in the modules compared.
TYPE_ONLY_NAMES: dict[str, Any] = {
    "Command": commands.Command, "cmd": commands, "Event": events.Event, "ev": events,
    "ContextEvent": events.ContextEvent, "SessionInfoEvent": events.SessionInfoEvent,
    "StateEvent": events.StateEvent, "Listener": protocol.Listener, "SessionSnapshot": protocol.SessionSnapshot,
}


def _shape(cls: type, name: str) -> list[tuple[str, Any, Any]]:
    """(parameter, kind, resolved type) for each parameter of ``cls.name`` but self, then the return."""
    function = getattr(cls, name)
    namespace = {**vars(sys.modules[function.__module__]), **TYPE_ONLY_NAMES}
    hints = typing.get_type_hints(function, globalns=namespace)
    parameters = [p for p in inspect.signature(function).parameters.values() if p.name != "self"]
    return ([(p.name, p.kind, hints.get(p.name, "(not annotated)")) for p in parameters]
            + [("return", None, hints.get("return", "(not annotated)"))])


@pytest.mark.parametrize("cls", [AgentSession, SessionProcess, FakeSession], ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", CALLS)
def test_every_session_has_the_protocols_calls_with_its_types(cls: type, name: str) -> None:
    assert _shape(cls, name) == _shape(SessionSurface, name), f"{cls.__name__}.{name} drifted from SessionSurface"


def test_the_comparison_sees_a_type_that_drifted() -> None:
    class Loose:
        def subscribe(self, listener: Callable[[Any], None]) -> Callable[[], None]:
            return lambda: None

        def submit(self, order: commands.Command) -> int:
            return 0

    assert _shape(Loose, "subscribe") != _shape(SessionSurface, "subscribe")  # Any is not an EventEnvelope
    assert _shape(Loose, "submit") != _shape(SessionSurface, "submit")  # another name
    # A listener takes an envelope (seq, command id and the event), not the bare event.
    assert typing.get_args(_shape(SessionSurface, "subscribe")[0][2]) == ([EventEnvelope], type(None))

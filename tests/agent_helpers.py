"""Build a real Agent (runtime wiring, real tools, real engine) against the fake LLM server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.wiring.config import load_settings
from app.kernel.describe import describe, legacy_notice
from app.kernel.envelope import EventEnvelope
from app.kernel.events import NoticeEvent
from app.wiring.runtime import build_agent, build_session

TEST_KEY = "sk-test-fake-key-0123456789"


class EventLog(list):
    """Collects every event (the envelopes too, in ``envelopes``); helpers to pick by type."""

    def __init__(self) -> None:
        super().__init__()
        self.envelopes: list[EventEnvelope] = []

    def __call__(self, envelope: EventEnvelope) -> None:
        self.envelopes.append(envelope)
        self.append(envelope.event)

    def of(self, kind: str) -> list[Any]:
        return [e for e in self if e.type == kind]

    def enveloped(self, kind: str) -> list[EventEnvelope]:
        """The envelopes of the events of type ``kind`` (their seq and command id)."""
        return [envelope for envelope in self.envelopes if envelope.event.type == kind]

    def caused_by(self, command_id: int | None) -> list[Any]:
        """The events the command ``command_id`` caused, in order."""
        return [envelope.event for envelope in self.envelopes if envelope.command_id == command_id]

    def notices(self) -> list[NoticeEvent]:
        """The notice lines stream-json prints after typed events (worded by app.kernel.describe)."""
        out = []
        for event in self:
            notice = legacy_notice(event)
            if notice is not None:
                out.append(NoticeEvent(level=notice[0], text=notice[1]))
        return out

    def lines(self) -> list[str]:
        """Every engine line a surface shows, in order."""
        return [line.text for line in map(describe, self) if line is not None]


def make_session(fake_llm, tmp_path: Path, monkeypatch, *, provider: str = "openai", approvals: bool = True,
                 resume: str | None = None, **overrides: Any):
    """A real session (runtime wiring) on ``provider`` talking to the fake server; returns (session, events)."""
    settings = _settings(fake_llm, tmp_path, monkeypatch, provider, overrides)
    workdir = tmp_path / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    session = build_session(settings, approvals=approvals, cwd=workdir, resume=resume)
    session.agent.options.retry_base_delay = 0.0
    events = EventLog()
    session.subscribe(events)
    return session, events


def _settings(fake_llm, tmp_path: Path, monkeypatch, provider: str, overrides: dict[str, Any]):
    # Tests script every request the server gets: the session memory's background calls
    # (on by default for users) come only where a test asks for them.
    overrides.setdefault("memory_update_tokens", 0)
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(tmp_path / "config"))
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    env_name = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "deepseek": "DEEPSEEK_API_KEY",
                "responses": "OPENAI_API_KEY"}[provider]
    monkeypatch.setenv(env_name, TEST_KEY)
    settings = load_settings({
        "provider": provider,
        "model": overrides.pop("model", "test-model"),
        "base_url": fake_llm.base_url(provider),
        "data_dir": tmp_path / "data",
        "max_retries": overrides.pop("max_retries", 2),
        **overrides,
    })
    return settings


def make_agent(fake_llm, tmp_path: Path, monkeypatch, *, provider: str = "openai", cwd: Path | None = None,
               **overrides: Any):
    """A real agent on ``provider`` talking to the fake server; returns (agent, events)."""
    settings = _settings(fake_llm, tmp_path, monkeypatch, provider, overrides)
    workdir = cwd or (tmp_path / "work")
    workdir.mkdir(parents=True, exist_ok=True)
    events = EventLog()
    agent = build_agent(settings, emit=events, cwd=workdir)
    agent.options.retry_base_delay = 0.0  # retries are tested for behaviour, not for waiting
    return agent, events

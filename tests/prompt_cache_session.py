"""A scripted Anthropic session through the real agent, with and without prompt caching.

The loopback server plays the model and bills every request the way Anthropic's prefix
cache would (``AnthropicPromptCache``: reads and writes follow the breakpoints the
provider sent). Each user turn asks about a source file: the model reads it with a tool
call, then answers. Costs come from the agent's own ledger with the built-in price
table, so both runs are priced identically.

    python tests/prompt_cache_session.py            # the 50-turn figures for the README
    python tests/prompt_cache_session.py --turns 10

``tests/test_providers_prompt_cache.py`` runs a shorter session of the same script.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from fake_llm_server import AnthropicPromptCache, FakeLLMServer, Reply, anthropic_text, anthropic_tool_calls  # noqa: E402

MODEL = "claude-sonnet-4-5"
FILES = 10


@dataclass
class SessionCost:
    turns: int
    model_calls: int
    cost_usd: float
    input_tokens: int  # uncached input
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    max_breakpoints: int
    compactions: int


def _source_file(i: int) -> str:
    lines = [f"def tide_{i}_{n}(height: float) -> float:\n    return height * {n + 1}.{i} - {n}\n" for n in range(60)]
    return f'"""Module {i} of the tide tables."""\n\n' + "\n".join(lines)


def _script(cache: AnthropicPromptCache, seen: list[dict[str, Any]]):
    def reply(body: dict[str, Any], path: str) -> Reply:
        seen.append(body)
        usage = cache.usage(body)
        last = body["messages"][-1]
        blocks = last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
        if body.get("tool_choice") == {"type": "none"}:  # the compaction call
            return anthropic_text("## Task goal and acceptance criteria\nAnswer questions about the tide modules.\n"
                                  "## Done so far\nRead several modules.\n## Next step\nWait for the next question.",
                                  usage={**usage, "output": 60})
        if any(b.get("type") == "tool_result" for b in blocks):
            return anthropic_text("Each function scales the height by a constant and subtracts its index.",
                                  usage={**usage, "output": 40})
        turn = sum(1 for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
                   and any(b.get("type") == "text" and b.get("text", "").startswith("Question") for b in m["content"]))
        return anthropic_tool_calls([("read_file", {"path": f"tides/mod{turn % FILES}.py"})],
                                    usage={**usage, "output": 30})
    return reply


async def run_session(turns: int, *, caching: bool, budget: int | None = None,
                      workdir: Path | None = None) -> SessionCost:
    from app.wiring.config import load_settings
    from app.wiring.runtime import build_agent

    temp = tempfile.TemporaryDirectory() if workdir is None else None
    root = Path(temp.name) if temp is not None else workdir
    assert root is not None
    saved = {k: os.environ.get(k) for k in ("TIDEGAUGE_CONFIG_DIR", "ANTHROPIC_API_KEY", "OPENAI_API_KEY",
                                            "DEEPSEEK_API_KEY")}
    server = FakeLLMServer().start()
    try:
        os.environ["TIDEGAUGE_CONFIG_DIR"] = str(root / "config")
        for name in ("OPENAI_API_KEY", "DEEPSEEK_API_KEY"):
            os.environ.pop(name, None)
        os.environ["ANTHROPIC_API_KEY"] = "sk-test-fake-key-0123456789"
        work = root / "work"
        (work / "tides").mkdir(parents=True, exist_ok=True)
        for i in range(FILES):
            (work / "tides" / f"mod{i}.py").write_text(_source_file(i), encoding="utf-8")
        overrides: dict[str, Any] = {"provider": "anthropic", "model": MODEL, "base_url": server.base_url("anthropic"),
                                     "data_dir": root / "data", "yes": True, "prompt_caching": caching,
                                     # caching is measured alone: no session-memory calls beside it
                                     "memory_update_tokens": 0}
        if budget is not None:
            overrides["budget"] = budget
        settings = load_settings(overrides)
        events: list[Any] = []
        agent = build_agent(settings, emit=lambda envelope: events.append(envelope.event), cwd=work)
        # the host passes these once it calls provider_options (see the branch report)
        agent.provider = server.provider("anthropic", model=MODEL, prompt_caching=caching)
        cache = AnthropicPromptCache()
        seen: list[dict[str, Any]] = []
        server.default = _script(cache, seen)
        try:
            for turn in range(turns):
                result = await agent.run_turn(f"Question {turn}: what does tides/mod{turn % FILES}.py compute?")
                assert result.stop_reason == "end_turn", result
        finally:
            await agent.aclose()
        total = agent.engine.ledger.total()
        marks = max(json.dumps(b).count('"cache_control"') for b in seen)
        return SessionCost(
            turns=turns, model_calls=len(seen), cost_usd=total.cost_usd,
            input_tokens=sum(e.input_tokens or 0 for e in events if e.type == "usage"),
            cache_read_tokens=sum(e.cache_read_tokens or 0 for e in events if e.type == "usage"),
            cache_write_tokens=sum(e.cache_write_tokens or 0 for e in events if e.type == "usage"),
            output_tokens=sum(e.output_tokens or 0 for e in events if e.type == "usage"),
            max_breakpoints=marks,
            compactions=sum(1 for e in events if e.type == "compaction" and e.ok),
        )
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if temp is not None:
            temp.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    without = asyncio.run(run_session(args.turns, caching=False))
    with_cache = asyncio.run(run_session(args.turns, caching=True))
    for label, cost in (("without caching", without), ("with caching", with_cache)):
        print(f"{label:16} ${cost.cost_usd:.4f}  calls {cost.model_calls}  input {cost.input_tokens:,}  "
              f"cache read {cost.cache_read_tokens:,}  cache write {cost.cache_write_tokens:,}  "
              f"output {cost.output_tokens:,}  max marks {cost.max_breakpoints}  compactions {cost.compactions}")
    print(f"ratio with/without: {with_cache.cost_usd / without.cost_usd:.3f}")


if __name__ == "__main__":
    main()

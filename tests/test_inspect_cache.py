"""What the prompt cache served, as `tidegauge inspect --json` shows it, through the real binary.

Anthropic: the fake server bills each request the way Anthropic's prefix cache does
(``AnthropicPromptCache``: reads and writes follow the ``cache_control`` marks the provider sent),
so the second request of a turn reads the first one's prefix, up to the breakpoint on the prompt.
OpenAI: the server reports ``prompt_tokens_details.cached_tokens``: an automatic prefix, no marks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from cli_in_process import run_cli
from fake_llm_server import (AnthropicPromptCache, Reply, anthropic_text, anthropic_tool_calls, cl100k_request_tokens,
                             openai_text, openai_tool_calls)
from test_engine_support import write_words

KEY = "sk-test-fake-key-0123456789"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"), "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"),
                "OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY})
    return env


def _session(provider: str, base_url: str, tmp_path: Path) -> None:
    """The session inspect reads: a set-up step, so the CLI runs in this process (tests/cli_in_process.py)."""
    (tmp_path / "work").mkdir(exist_ok=True)
    write_words(tmp_path / "work" / "tides.txt", 900, "tide")
    proc = run_cli(["--provider", provider, "--model", "m", "--base-url", base_url,
                    "-p", "read tides.txt and tell me its last word"], cwd=tmp_path / "work", env=_env(tmp_path))
    assert proc.returncode == 0, proc.stderr


def _inspect(tmp_path: Path, request: int) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "app", "inspect", "--request", str(request), "--json"],
                          cwd=tmp_path / "work", env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_anthropic_breakpoints_and_the_prefix_the_cache_served(fake_llm, tmp_path: Path) -> None:
    cache = AnthropicPromptCache(min_tokens=64)
    billed: list[dict[str, int]] = []

    def reply(body: dict[str, Any], path: str) -> Reply:
        usage = cache.usage(body)
        billed.append(usage)
        if len(billed) == 1:
            return anthropic_tool_calls([("read_file", {"path": "tides.txt"})], usage={**usage, "output": 20})
        return anthropic_text("The last word is tide899.", usage={**usage, "output": 10})

    fake_llm.default = reply
    _session("anthropic", fake_llm.base_url("anthropic"), tmp_path)
    assert len(billed) == 2 and billed[0]["cache_read"] == 0 and billed[1]["cache_read"] > 0

    first = _inspect(tmp_path, 1)
    # marks on the system prompt, the last tool and the prompt; nothing was cached yet
    assert first["cache"]["breakpoints"] and first["cache"]["read_tokens"] == 0
    assert first["cache"]["write_tokens"] == billed[0]["cache_write"] > 0
    assert not any(part["cached"] for part in first["parts"])
    marked = [first["parts"][i - 1] for i in first["cache"]["breakpoints"]]
    assert marked[-1]["origin"] == "user" and "tides.txt" in marked[-1]["text"]

    second = _inspect(tmp_path, 2)
    cache_view, parts = second["cache"], second["parts"]
    assert cache_view["read_tokens"] == billed[1]["cache_read"]
    assert cache_view["write_tokens"] == billed[1]["cache_write"]
    served = cache_view["cached_parts"]
    # the cached parts are a prefix ending at the breakpoint on the prompt (what request 1 wrote)
    assert [part["cached"] for part in parts] == [True] * served + [False] * (len(parts) - served)
    assert served in cache_view["breakpoints"]
    assert parts[served - 1]["origin"] == "user" and "tides.txt" in parts[served - 1]["text"]
    # the turn's new parts (the call and its result, marked for the next request) were not served
    result = next(i for i, part in enumerate(parts, start=1) if part["kind"] == "tool_result")
    assert result > served and result in cache_view["breakpoints"]


def test_openai_cached_tokens_mark_a_prefix_of_parts_without_breakpoints(fake_llm, tmp_path: Path) -> None:
    prompts: list[int] = []

    def reply(body: dict[str, Any], path: str) -> Reply:
        prompt = cl100k_request_tokens(body)
        cached = prompts[-1] // 128 * 128 if prompts else 0  # the previous request's prefix, in 128-token steps
        prompts.append(prompt)
        usage = dict(prompt=prompt, completion=10, cached=cached)
        if len(prompts) == 1:
            return openai_tool_calls([("read_file", {"path": "tides.txt"})], usage=usage)
        return openai_text("The last word is tide899.", usage=usage)

    fake_llm.default = reply
    _session("openai", fake_llm.base_url("openai"), tmp_path)
    second = _inspect(tmp_path, 2)
    cache_view, parts = second["cache"], second["parts"]
    assert cache_view["breakpoints"] == [] and cache_view["read_tokens"] == prompts[0] // 128 * 128 > 0
    served = cache_view["cached_parts"]
    assert 0 < served < len(parts)
    assert [part["cached"] for part in parts] == [True] * served + [False] * (len(parts) - served)
    # what the parts served add up to stays within what the server read (a part half inside is not served)
    assert sum(part["tokens"] for part in parts[:served]) <= cache_view["read_tokens"] * 1.05
    assert not any(part["cached"] for part in parts if part["kind"] == "tool_result")


def test_a_planted_index_with_bogus_breakpoints_is_shown_without_them(tmp_path: Path) -> None:
    """The index is a file on disk: breakpoints out of range are ignored, a line that is not
    numbers is skipped, and the inspector still shows the request."""
    from app.context.request_parts import request_parts
    from app.kernel.messages import Message
    from app.kernel.request_store import INDEX_NAME, RequestEnvelope, RequestStore, StoredRequests

    folder = tmp_path / "requests"
    parts = request_parts("You are a test.", "", [], [Message.typed_by_user("hello there")])
    gauge = sum(p.tokens for p in parts)
    RequestStore(folder).record(parts, RequestEnvelope(number=0, gauge_tokens=gauge, input_tokens=0,
                                                       cache_read_tokens=gauge, cache_write_tokens=0))
    line = json.loads((folder / INDEX_NAME).read_text().splitlines()[0])
    with open(folder / INDEX_NAME, "a", encoding="utf-8") as index:
        index.write(json.dumps({**line, "keep": len(parts), "add": [], "breakpoints": [-5, 10**12, 0]}) + "\n")
        index.write(json.dumps({**line, "breakpoints": ["a"]}) + "\n")
    stored = StoredRequests.load(folder)
    assert stored.count == 2
    views = stored.views(2)
    assert [v.breakpoint for v in views] == [True] + [False] * (len(views) - 1)
    assert all(v.cached for v in views)

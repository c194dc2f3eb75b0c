"""MCP pieces that need no server: config tables, tool names, the deferral, the breakdown per server."""

from __future__ import annotations

from collections.abc import Iterator

import os
import re
from pathlib import Path

import pytest

from app.kernel import redact as redact_mod
from app.kernel.errors import ConfigError
from app.wiring.config import load_settings
from app.context.accounting import ContextAccounting
from app.context.tokens import estimate_tools
from app.mcp.tools import MAX_TOOL_NAME, prefixed_name
from app.kernel.messages import ToolSpec
from app.tools.base import ToolContext, ToolInputError
from app.tools.deferral import LOAD_TOOLS, LoadToolsTool, ToolDeferral

NAME_RULE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # Anthropic's and OpenAI's rule for tool names


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in list(os.environ):
        if name.upper().startswith("TIDEGAUGE_") or name.endswith("_API_KEY"):
            monkeypatch.delenv(name, raising=False)
    directory = tmp_path / "config"
    directory.mkdir()
    monkeypatch.setenv("TIDEGAUGE_CONFIG_DIR", str(directory))
    yield directory
    redact_mod.clear_secrets()


# ---------------------------------------------------------------- config.toml

def test_mcp_server_tables_load_from_config_toml(config_dir: Path) -> None:
    (config_dir / "config.toml").write_text(
        '[mcp_servers.git]\ncommand = "uvx"\nargs = ["mcp-server-git", "--repository", "."]\n'
        'env = { GIT_PAGER = "cat" }\n\n[mcp_servers.remote]\nurl = "http://127.0.0.1:8000/mcp"\n', encoding="utf-8")

    settings = load_settings()

    assert settings.mcp_servers["git"].command == "uvx"
    assert settings.mcp_servers["git"].args == ["mcp-server-git", "--repository", "."]
    assert settings.mcp_servers["git"].env == {"GIT_PAGER": "cat"}
    assert settings.mcp_servers["remote"].url == "http://127.0.0.1:8000/mcp"
    assert settings.tool_defer_share == pytest.approx(0.10)


@pytest.mark.parametrize("table, expected", [
    ('[mcp_servers.git]\nargs = ["x"]\n', "either command"),
    ('[mcp_servers.git]\ncommand = "a"\nurl = "http://x"\n', "not both"),
    ('[mcp_servers.git]\nurl = "ftp://x"\n', "http:// or https://"),
    ('[mcp_servers.git]\ncommand = "a"\ncomand = "typo"\n', "unknown setting"),
    ('[mcp_servers."my server"]\ncommand = "a"\n', "server name 'my server'"),
])
def test_a_bad_mcp_server_table_is_one_line_naming_it(config_dir: Path, table: str, expected: str) -> None:
    (config_dir / "config.toml").write_text(table, encoding="utf-8")

    with pytest.raises(ConfigError) as err:
        load_settings()

    message = str(err.value)
    assert "\n" not in message
    assert "mcp_servers" in message and expected in message
    assert str(config_dir / "config.toml") in message


# ---------------------------------------------------------------- tool names

def test_prefixed_names_are_valid_for_both_apis_and_unique() -> None:
    taken: set[str] = {"read_file"}
    names: list[str] = []
    for tool in ("git_log", "git.log", "git log", "x" * 200, "y" * 200):
        names.append(prefixed_name("git", tool, taken))
        taken.add(names[-1])  # as the hub does, one tool after the other

    assert names[0] == "git__git_log"
    assert all(NAME_RULE.match(name) for name in names)
    assert len(set(names)) == len(names)  # "git.log" and "git log" clean up to the same name
    assert max(len(name) for name in names) == MAX_TOOL_NAME


# ---------------------------------------------------------------- deferral

def _spec(name: str, words: int = 60) -> ToolSpec:
    return ToolSpec(name=name, description=f"{name}: " + "searches records of a catalogue " * (words // 5),
                    input_schema={"type": "object", "properties": {"query": {"type": "string",
                                                                             "description": "what to find"}},
                                  "required": ["query"]})


CORE = [_spec("read_file", 10), _spec("run_bash", 10)]
REMOTE = [_spec(f"many__tool_{i:03d}") for i in range(200)]


def test_definitions_over_the_share_are_deferred_behind_load_tools() -> None:
    remote_tokens = estimate_tools(REMOTE)
    seen: list[list[ToolSpec]] = []
    deferral = ToolDeferral(core=CORE, deferrable=REMOTE, window=remote_tokens * 5, share=0.10,
                            on_change=seen.append)

    sent = deferral.model_specs()
    assert deferral.active
    assert [s.name for s in sent] == ["read_file", "run_bash", LOAD_TOOLS]
    load_description = sent[-1].description
    assert all(spec.name in load_description for spec in REMOTE)  # every name is offered
    assert deferral.saved_tokens == estimate_tools(CORE + REMOTE) - estimate_tools(sent)
    assert deferral.saved_tokens > estimate_tools(sent)  # the point: most of the cost is gone
    assert seen[-1] == sent  # the engine was told


def test_definitions_under_the_share_are_sent_in_full() -> None:
    few = REMOTE[:3]
    deferral = ToolDeferral(core=CORE, deferrable=few, window=estimate_tools(few) * 20, share=0.10)

    assert not deferral.active
    assert deferral.model_specs() == CORE + few
    assert deferral.saved_tokens == 0


def test_the_biggest_server_is_deferred_first_and_a_small_one_keeps_its_definitions() -> None:
    git = [_spec("git__git_log", 20), _spec("git__git_diff", 20)]
    tools = REMOTE + git
    room = estimate_tools(git) * 2  # the small server fits, the big one does not
    deferral = ToolDeferral(core=CORE, deferrable=tools, window=room * 10, share=0.10,
                            group_of=lambda name: name.split("__")[0])

    sent = deferral.model_specs()
    assert [s.name for s in sent] == ["read_file", "run_bash", "git__git_log", "git__git_diff", LOAD_TOOLS]
    assert "many__tool_000" in sent[-1].description and "git__git_log" not in sent[-1].description
    assert "Already" in deferral.load(["git__git_log"])  # sent in full already: nothing to load


async def test_load_tools_sends_the_named_definitions_from_then_on(tmp_path: Path) -> None:
    seen: list[list[ToolSpec]] = []
    deferral = ToolDeferral(core=CORE, deferrable=REMOTE, window=1_000, share=0.10, on_change=seen.append)
    saved_before = deferral.saved_tokens
    tool = LoadToolsTool(deferral)
    ctx = ToolContext(workspace=tmp_path, tool_results_dir=tmp_path / "r")

    out = await tool.run({"names": ["many__tool_007", "many__tool_150"]}, ctx)

    assert not out.is_error and "many__tool_007" in out.text
    names = [s.name for s in seen[-1]]
    assert names == ["read_file", "run_bash", LOAD_TOOLS, "many__tool_007", "many__tool_150"]
    assert seen[-1][-1] is REMOTE[150]  # the full definition, schema and all
    assert 0 < deferral.saved_tokens < saved_before
    assert "many__tool_007" not in deferral.deferred_names

    again = await tool.run({"names": ["many__tool_007"]}, ctx)
    assert "Already loaded" in again.text and len(seen[-1]) == len(names)


async def test_load_tools_names_what_does_not_exist_and_suggests(tmp_path: Path) -> None:
    deferral = ToolDeferral(core=CORE, deferrable=REMOTE, window=1_000, share=0.10)
    tool = LoadToolsTool(deferral)
    ctx = ToolContext(workspace=tmp_path, tool_results_dir=tmp_path / "r")

    out = await tool.run({"names": ["many__tool_7"]}, ctx)
    assert out.is_error and "many__tool_7" in out.text and "did you mean" in out.text

    with pytest.raises(ToolInputError, match="names"):
        await tool.run({"names": 7}, ctx)


# ---------------------------------------------------------------- breakdown per server

def test_breakdown_gives_each_server_its_own_part_and_still_adds_up() -> None:
    git = [_spec("git__git_log"), _spec("git__git_diff")]
    time_tools = [_spec("time__get_current_time")]
    tools = CORE + git + time_tools
    owner = {s.name: s.name.split("__")[0] for s in git + time_tools}.get
    accounting = ContextAccounting()

    plain = accounting.breakdown("system", "", tools, [])
    parts = accounting.breakdown("system", "", tools, [], tool_owner=owner)

    assert parts["mcp:git"] == estimate_tools(git)
    assert parts["mcp:time"] == estimate_tools(time_tools)
    assert parts["tools"] == plain["tools"] - parts["mcp:git"] - parts["mcp:time"]
    assert sum(parts.values()) == sum(plain.values())
    assert set(plain) <= set(parts)  # the existing keys are all still there


def test_a_core_tool_registered_after_the_deferral_stays_in_what_is_sent() -> None:
    core = list(CORE)
    seen: list[list[ToolSpec]] = []
    deferral = ToolDeferral(core=list(core), deferrable=REMOTE, window=1_000, share=0.10, on_change=seen.append,
                            core_source=lambda: list(core))
    core.append(_spec("task", 10))  # e.g. the task tool, registered once MCP had started

    deferral.load(["many__tool_001"])

    assert [s.name for s in seen[-1]] == ["read_file", "run_bash", "task", LOAD_TOOLS, "many__tool_001"]
    assert deferral.saved_tokens == estimate_tools(core + REMOTE) - estimate_tools(seen[-1])

"""A realistic engine session for the engine benchmarks: rounds of one tool call and its result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SYSTEM_PROMPT = "You are tidegauge, a coding agent working in the user's terminal. " * 20

# A tool result that looks like a file read: line-numbered Python, ~2,500 characters.
_SOURCE_LINES = [
    "def handle(request):",
    "    user = request.user  # the session's user, or None",
    "    if user is None:",
    "        raise PermissionError('login required')",
    "    payload = json.loads(request.body or '{}')",
    "    return {'status': 'ok', 'items': [item.to_dict() for item in payload.get('items', [])]}",
]


def tool_result_text(turn: int, tag: str = "", lines: int = 40) -> str:
    """A distinct file-read result per turn and tag (so no two results share an entry
    of the token-count cache, as two real file reads would not)."""
    body = [f"{n:>6}\t{_SOURCE_LINES[n % len(_SOURCE_LINES)]}  # {tag}turn {turn}" for n in range(1, lines + 1)]
    return f"src/module_{turn}.py\n" + "\n".join(body)


def new_engine(tool_results_dir: Path | None = None, transcript_path: Path | None = None,
               window: int = 200_000, budget: int = 150_000) -> Any:
    """A ContextEngine as the runtime builds it: system prompt, the five tools, a transcript."""
    from app.context.engine import ContextEngine, EngineConfig
    from app.context.memory import MemoryBundle
    from app.tools.registry import default_registry

    engine = ContextEngine(system_prompt=SYSTEM_PROMPT, memory=MemoryBundle([]),
                           tools=default_registry().specs(),
                           config=EngineConfig(window=window, budget=budget),
                           tool_results_dir=tool_results_dir)
    if transcript_path is not None:
        from app.session.transcript import TranscriptWriter

        engine.transcript = TranscriptWriter(transcript_path)
    return engine


def round_messages(turn: int, tag: str = "") -> tuple[Any, Any]:
    """(assistant message with one read_file call, user message with its result)."""
    from app.kernel.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

    call_id = f"call_{turn}"
    assistant = Message(role="assistant", content=[
        TextBlock(text=f"Reading module {turn} to see how requests are handled."),
        ToolUseBlock(id=call_id, name="read_file", input={"path": f"src/module_{turn}.py"}),
    ])
    result = Message(role="user", content=[ToolResultBlock(tool_use_id=call_id, content=tool_result_text(turn, tag))])
    return assistant, result


def usage_for(context_tokens: int) -> Any:
    """A usage record as a server would send it for a request of ``context_tokens`` (mostly cached)."""
    from app.kernel.usage import Usage

    output = 60
    cached = max(0, context_tokens - output - 500)
    return Usage(input_tokens=max(0, context_tokens - output - cached), cache_read_tokens=cached,
                 cache_write_tokens=0, output_tokens=output)


def play_turn(engine: Any, turn: int, tag: str = "") -> None:
    play_messages(engine, *round_messages(turn, tag))


def play_messages(engine: Any, assistant: Any, result: Any) -> None:
    """One agent step as the agent does it, engine side only: the model's reply with a tool
    call arrives (append, usage, a gauge point, a context event), then the tool result
    (append, projection, a context event)."""
    engine.append(assistant)
    projected = engine.projection().projected_tokens
    engine.record_usage("main", usage_for(projected), None)
    engine.note_model_call()
    engine.context_event()
    engine.append(result)
    engine.projection()
    engine.context_event()

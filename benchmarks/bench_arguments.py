"""10. A huge tool argument from the model, through the path the agent really uses.

Subject: the real OpenAI chat provider streams one reply from the loopback
server (tests/fake_llm_server.py, real HTTP/1.1 with chunked SSE) whose one
tool call has a 30 MB argument in 64 KB fragments, as a server streams them;
the provider decodes and assembles it (holding the argument only up to its
cap), and the registry answers the call as refused, with the size and the
limit: what the model gets back.

Baseline: reading the same bytes, the same reply from the same server over
httpx with nothing done to them.

Target: at most 4× the baseline (a 30 MB argument took 35 s and 1.7 GB
before it was bounded: the answer now costs about what receiving it does).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._fixtures import require
from benchmarks.harness import Check, interleaved, median, seconds

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

NAME = "10 30 MB tool argument refused"
MAX_RATIO = 4.0
FRAGMENT = 64 * 1024
MB = 1024 * 1024


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(quick: bool) -> list[Check]:
    for module in ("app.providers.openai", "app.providers.json_fields", "app.tools.registry"):
        require(module)
    import httpx

    import fake_llm_server as fls  # noqa: E402  (tests/ is not a package)
    from app.kernel.messages import Message
    from app.providers.base import Completed, ModelRequest
    from app.tools.base import ToolContext
    from app.tools.registry import default_registry

    size = (8 if quick else 30) * MB
    raw = json.dumps({"path": "big.txt", "content": "a" * size})
    reply = fls.openai_tool_calls([("write_file", raw, "call_huge")], fragments=len(raw) // FRAGMENT)
    body_bytes = sum(len(event) for event in reply.events)
    reps = 3 if quick else 5
    outcome: dict[str, Any] = {}

    with fls.FakeLLMServer() as server, tempfile.TemporaryDirectory(prefix="tidegauge-bench-") as tmp:
        server.default = lambda _body, _path: reply
        provider = server.provider("openai")
        request = ModelRequest(system="bench", messages=[Message.user("write it")], tools=[], max_tokens=100)
        registry = default_registry()
        ctx = ToolContext(workspace=Path(tmp), tool_results_dir=Path(tmp) / "tool-results", call_id="call_huge")
        url = server.base_url("openai") + "/chat/completions"

        async def read_bytes() -> float:
            async with httpx.AsyncClient() as client:
                started = time.perf_counter()
                received = 0
                async with client.stream("POST", url, json={"model": "m", "messages": []}) as response:
                    async for chunk in response.aiter_bytes():
                        received += len(chunk)
                elapsed = time.perf_counter() - started
            assert received >= body_bytes, (received, body_bytes)
            return elapsed

        async def answer() -> float:
            started = time.perf_counter()
            completed = None
            async for event in provider.stream(request):
                if isinstance(event, Completed):
                    completed = event
            assert completed is not None
            (use,) = completed.message.tool_uses
            run = await registry.run(use.name, use.input, ctx)
            elapsed = time.perf_counter() - started
            outcome.update(content=run.content, is_error=run.is_error)
            return elapsed

        loop = asyncio.new_event_loop()
        try:
            rss_before = _peak_rss_mb()
            base, subj = interleaved(lambda: loop.run_until_complete(read_bytes()),
                                     lambda: loop.run_until_complete(answer()), reps)
            loop.run_until_complete(provider.aclose())
        finally:
            loop.close()
        # It must have done the real work: the call answered as refused, with the size and the limit.
        assert outcome["is_error"] and f"{len(raw):,} characters" in outcome["content"], outcome
        assert not (Path(tmp) / "big.txt").exists()

    b, s = median(base), median(subj)
    label = NAME if not quick else NAME.replace("30 MB", "8 MB")
    return [Check(
        name=label,
        figure=(f"{seconds(s)} vs {seconds(b)} reading the same {body_bytes / MB:.0f} MB over HTTP "
                f"(median of {reps}); peak RSS {_peak_rss_mb():.0f} MB, {rss_before:.0f} MB before"),
        target=f"<= {MAX_RATIO:g}× reading the bytes",
        value=s / b, limit=MAX_RATIO, op="<=",
        extra={"subject_s": subj, "baseline_s": base, "peak_rss_mb": _peak_rss_mb()},
    )]

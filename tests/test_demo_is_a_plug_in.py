"""ARCHITECTURE.md: "removing app/demo/ and its line in factory.py leaves a working agent".

Checked as a user would notice: a copy of the program without the demo imports, answers
--help, and runs a task headless against the fake server; with no key it says which
key it needs (there is no demo to fall back on)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import run_cli
from fake_llm_server import FakeLLMServer, openai_text

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-test-fake-key-0123456789"
DEMO_LINE = '    "demo": "app.demo.plugin:DEMO_PLUGIN",\n'


def _sources_and_their_bytecode(folder: str, names: list[str]) -> list[str]:
    """What copytree leaves out: in a __pycache__, everything but the bytecode (the kept files are
    made again). The bytecode is checked against its source's size and time as anywhere (copy2
    keeps the time; factory.py, changed below, is compiled again): without it the copy's first
    process compiled every module (~2 CPU-s)."""
    if Path(folder).name != "__pycache__":
        return []
    return [name for name in names if not name.endswith(".pyc")]


@pytest.fixture(scope="module")
def without_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("no-demo")
    for folder in ("app", "widgets", "styles"):
        shutil.copytree(ROOT / folder, tree / folder, ignore=_sources_and_their_bytecode)
    shutil.rmtree(tree / "app" / "demo")
    factory = tree / "app" / "providers" / "factory.py"
    source = factory.read_text(encoding="utf-8")
    assert source.count(DEMO_LINE) == 1, "the demo's line in factory.py changed: update DEMO_LINE"
    factory.write_text(source.replace(DEMO_LINE, ""), encoding="utf-8")
    return tree


def _env(tree: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_")}
    env.update({"PYTHONPATH": str(tree), "TIDEGAUGE_CONFIG_DIR": str(tmp_path / "config"),
                "TIDEGAUGE_DATA_DIR": str(tmp_path / "data"), **extra})
    return env


def _run(tree: Path, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, *args], cwd=work, env=_env(tree, tmp_path, **env),
                          capture_output=True, text=True, timeout=120)


def test_every_module_imports_without_the_demo(without_demo: Path, tmp_path: Path) -> None:
    script = (
        "import importlib, pathlib, sys\n"
        f"tree = pathlib.Path({str(without_demo)!r})\n"
        "names = ['.'.join(p.relative_to(tree).with_suffix('').parts).removesuffix('.__init__')\n"
        "         for top in ('app', 'widgets') for p in sorted((tree / top).rglob('*.py'))]\n"
        "for name in names:\n"
        "    if name.endswith('__main__'):\n"
        "        continue  # running it is the other test\n"
        "    module = importlib.import_module(name)\n"
        "    assert str(module.__file__).startswith(str(tree)), f'{name} came from {module.__file__}'\n"
        "print(len(names), 'modules')\n"
    )
    proc = _run(without_demo, tmp_path, "-c", script)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split()[0]) > 80, proc.stdout


def test_help_and_a_headless_task_without_the_demo(without_demo: Path, tmp_path: Path,
                                                   fake_llm: FakeLLMServer) -> None:
    helped = _run(without_demo, tmp_path, "-m", "app", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "--provider" in helped.stdout and "demo" not in helped.stdout.lower()

    fake_llm.enqueue(openai_text("Done without the demo."))
    ran = _run(without_demo, tmp_path, "-m", "app", "-p", "say done", "--provider", "openai", "--model", "m",
               "--base-url", fake_llm.base_url("openai"), OPENAI_API_KEY=KEY)
    assert ran.returncode == 0, ran.stderr
    assert "Done without the demo." in ran.stdout
    assert len(fake_llm.requests) == 1


def test_with_no_key_and_no_demo_the_agent_names_the_key_it_needs(without_demo: Path, tmp_path: Path) -> None:
    proc = _run(without_demo, tmp_path, "-m", "app", "-p", "hello")
    assert proc.returncode != 0
    assert "ANTHROPIC_API_KEY" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_plug_ins_flags_are_read_without_loading_a_provider(tmp_path: Path) -> None:
    # --help and --version stay quick: the plug-in table and its declarations import no pydantic,
    # no provider and no demo scenario (those load when the demo is chosen).
    script = ("import sys, app.wiring.cli as cli\n"
              "cli.build_parser()\n"
              "print(sorted(m for m in sys.modules if m == 'pydantic' or m.startswith(('app.demo.provider', "
              "'app.demo.scenarios', 'app.providers.base'))))\n")
    proc = _run(ROOT, tmp_path, "-c", script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize(("source", "value", "said"), [
    ("env", "inf", "demo_speed: input should be a finite number (got 'inf') [from TIDEGAUGE_DEMO_SPEED]"),
    ("flag", "-1", "demo_speed: must be >= 0 (got -1.0) [from --demo-speed]"),
])
def test_a_plug_ins_setting_is_checked_like_any_other(tmp_path: Path, source: str, value: str, said: str) -> None:
    args = ["-p", "hi", "--provider", "demo", *(["--demo-speed", value] if source == "flag" else [])]
    env = {"TIDEGAUGE_DEMO_SPEED": value} if source == "env" else {}
    if source == "flag":  # the same check on another source: the CLI in this process (tests/cli_in_process.py)
        (tmp_path / "work").mkdir()
        proc = run_cli(args, cwd=tmp_path / "work", env=_env(ROOT, tmp_path, **env))
    else:  # the real binary's one line and exit code
        proc = _run(ROOT, tmp_path, "-m", "app", *args, **env)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"tidegauge: config: {said}"

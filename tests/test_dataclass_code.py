"""Dataclasses' generated methods are compiled once and reused (app/system/dataclass_code.py).

Each case is a real interpreter with its own ``-X pycache_prefix``, so the file it reads and
writes is the test's own, never the checkout's ``app/__pycache__``.
"""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
import threading
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from typing import Any

import pytest

from app.system import dataclass_code

ROOT = Path(__file__).resolve().parents[1]

# Classes of every kind the house uses: frozen with defaults and a factory, slots, keyword-only.
PROGRAM = """
import json, sys
from app.system import dataclass_code
dataclass_code.install()
import dataclasses
from dataclasses import dataclass, field, FrozenInstanceError

@dataclass(frozen=True)
class Step:
    name: str
    size: int = 3
    tags: tuple[str, ...] = ()

@dataclass(slots=True)
class Row:
    label: str
    items: list[int] = field(default_factory=list)

@dataclass(kw_only=True, order=True)
class Mark:
    at: int
    note: str = ""

step = Step("read")
try:
    step.size = 4
    frozen = "assigned"
except FrozenInstanceError:
    frozen = "refused"
row = Row("x"); row.items.append(1)
seen = {
    "repr": [repr(step), repr(row), repr(Mark(at=2))],
    "eq": [Step("read") == step, Step("read", 4) == step, hash(step) == hash(Step("read"))],
    "frozen": frozen,
    "default_factory_fresh": Row("y").items == [],
    "order": Mark(at=1) < Mark(at=2),
    "compiled_here": dataclass_code._new,
    "path": dataclass_code.cache_path(),
}
print(json.dumps(seen))
"""


def _run(prefix: Path, *flags: str, env_extra: dict[str, str] | None = None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(ROOT), **(env_extra or {}))
    done = subprocess.run([sys.executable, "-X", f"pycache_prefix={prefix}", *flags, "-c", PROGRAM],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    # stdout has been seen empty with exit code 0 and nothing on stderr, under load in a test worker
    # only (never in 600 runs outside pytest). ``subprocess`` reports 0 for a child another reaper
    # collected: the threads this worker runs then are what could have (a test's leftovers).
    assert done.stdout.strip(), (done.stdout, done.stderr, [t.name for t in threading.enumerate()])
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_second_process_compiles_no_method_and_its_classes_behave_the_same(tmp_path: Path) -> None:
    first = _run(tmp_path)
    path = Path(str(first["path"]))
    assert path.is_relative_to(tmp_path) and path.is_file()
    second = _run(tmp_path)

    assert first["compiled_here"] > 0
    assert second["compiled_here"] == 0
    assert {k: v for k, v in second.items() if k != "compiled_here"} == \
        {k: v for k, v in first.items() if k != "compiled_here"}
    assert second["frozen"] == "refused" and second["eq"] == [True, False, True]
    assert second["repr"] == ["Step(name='read', size=3, tags=())", "Row(label='x', items=[1])",
                              "Mark(at=2, note='')"]


def test_a_file_this_interpreter_did_not_write_is_left_unread_and_replaced(tmp_path: Path) -> None:
    path = Path(str(_run(tmp_path)["path"]))
    good = path.read_bytes()
    for bad in (b"\x00\x01\x02\x03" + good[4:],        # another Python's magic number
                good[: len(good) // 2],                  # cut short
                MAGIC_NUMBER + b"not marshal at all",
                MAGIC_NUMBER + marshal.dumps(["a list", "not a mapping"]),
                # the right texts, each with code that is not code
                MAGIC_NUMBER + marshal.dumps({text: b"\x00junk" for text in dataclass_code.read(str(path))})):
        path.write_bytes(bad)
        seen = _run(tmp_path)
        assert seen["compiled_here"] > 0
        assert seen["frozen"] == "refused"
        assert path.read_bytes().startswith(MAGIC_NUMBER) and dataclass_code.read(str(path))


def test_an_oversized_file_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.bin"
    with open(path, "wb") as file:
        file.write(MAGIC_NUMBER)
        file.truncate(dataclass_code.MAX_BYTES + 1)  # sparse: no 4 MB written
    assert dataclass_code.read(str(path)) == {}


def test_nothing_is_written_where_python_writes_no_bytecode(tmp_path: Path) -> None:
    seen = _run(tmp_path, "-B")
    assert seen["compiled_here"] > 0
    assert not Path(str(seen["path"])).exists()


def test_the_installed_command_and_python_m_app_both_keep_the_methods(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "tidegauge"
    if not script.exists():
        pytest.skip("tidegauge is not installed as a console script in this environment")
    for name, command in (("script", [str(script), "--help"]), ("module", [sys.executable, "-m", "app", "--help"])):
        prefix = tmp_path / name
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPYCACHEPREFIX=str(prefix), PYTHONPATH=str(ROOT))
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        kept = list(prefix.rglob(f"{dataclass_code.FILE_STEM}.*.bin"))
        assert len(kept) == 1 and dataclass_code.read(str(kept[0])), name

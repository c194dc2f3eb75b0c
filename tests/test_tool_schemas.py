"""The tools' argument schemas the model is sent: read from the argument models' fields without
building their validators (app/tools/base.py ``_build_schema``), the same as pydantic's generator
makes them, and a model of another shape still gets pydantic's."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import Field

import app.tools
from app.tools import base
from app.tools.base import ToolArgs, args_schema

ROOT = Path(__file__).resolve().parents[1]


def _argument_models() -> list[type[ToolArgs]]:
    for module in pkgutil.iter_modules(app.tools.__path__):
        importlib.import_module(f"app.tools.{module.name}")

    def below(cls: type[ToolArgs]) -> list[type[ToolArgs]]:
        return [found for sub in cls.__subclasses__() for found in (sub, *below(sub))]

    return [model for model in below(ToolArgs) if model.__module__.startswith("app.")]


def test_every_tools_schema_is_pydantics() -> None:
    models = _argument_models()
    assert {"RunBashArgs", "ReadFileArgs", "EditFileArgs"} <= {model.__name__ for model in models}
    for model in models:
        assert base._build_schema(model) == base._schema_from_pydantic(model), model.__name__
    # e.g. run_bash's: bounds, descriptions and required, as the model saw them before
    bash = next(model for model in models if model.__name__ == "RunBashArgs")
    schema = args_schema(bash)
    assert schema["type"] == "object" and "command" in schema["required"]
    assert schema["properties"]["command"]["type"] == "string"


# In a process of its own: in a test worker, other tests have validated tool arguments already,
# so the models this must see unbuilt may be built before it runs.
NO_BUILD_CHECK = """
import importlib, json, pkgutil
import app.tools
from app.tools import base
from app.tools.base import ToolArgs
for module in pkgutil.iter_modules(app.tools.__path__):
    importlib.import_module(f"app.tools.{module.name}")
def below(cls):
    return [found for sub in cls.__subclasses__() for found in (sub, *below(sub))]
models = [m for m in below(ToolArgs) if m.__module__.startswith("app.")]
unbuilt_before = [m.__name__ for m in models if not m.__pydantic_complete__]
for m in models:
    base._build_schema(m)
print(json.dumps({"unbuilt_before": unbuilt_before,
                  "built_by_schema": [m.__name__ for m in models if m.__pydantic_complete__ and m.__name__ in unbuilt_before]}))
"""


def test_no_validator_is_built_for_a_tools_schema() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", NO_BUILD_CHECK], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert "RunBashArgs" in seen["unbuilt_before"]
    assert seen["built_by_schema"] == []


def test_plain_fields_are_read_directly_and_other_shapes_go_to_pydantic() -> None:
    class _Shapes(ToolArgs):
        path: str = Field(description="a file")
        count: int | None = Field(None, ge=1, le=10, description="how many")
        ratio: float = Field(0.5, ge=0, json_schema_extra={"description": "overridden", "title": "dropped"})
        strict: bool = Field(False, strict=True)

    class _Listed(ToolArgs):
        names: list[str] = Field(default_factory=list, description="names")
        mode: str = Field("a", pattern="^[ab]$")

    direct = base._build_schema(_Shapes)
    assert not _Shapes.__pydantic_complete__
    assert direct == base._schema_from_pydantic(_Shapes) == {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "a file"},
                       "count": {"type": "integer", "minimum": 1, "maximum": 10, "description": "how many"},
                       "ratio": {"type": "number", "minimum": 0, "description": "overridden"},
                       "strict": {"type": "boolean"}},
        "required": ["path"],
    }
    listed: dict[str, Any] = base._build_schema(_Listed)  # a list and a pattern: pydantic's generator
    assert _Listed.__pydantic_complete__
    assert listed == base._schema_from_pydantic(_Listed)
    assert listed["properties"]["names"] == {"type": "array", "description": "names"}

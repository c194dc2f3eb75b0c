"""ARCHITECTURE.md: "Only the engine computes context figures ... the chart points the engine
records". Checked on the source: a chart point is made in app/context (the engine live,
chart_history.py for sessions recorded before points were events) and nowhere else."""

from __future__ import annotations

import ast
from pathlib import Path

from source_trees import ON_ONE_WORKER, tree

ROOT = Path(__file__).resolve().parent.parent
pytestmark = ON_ONE_WORKER
MAKERS = ("ChartPointEvent", "ThresholdsModel")  # the gauge's history points and its lines


def _made_outside_context(root: Path = ROOT) -> list[str]:
    found = []
    for path in [*(root / "app").rglob("*.py"), *(root / "widgets").rglob("*.py")]:
        if "context" in path.relative_to(root).parts[:2] or "project" in path.relative_to(root).parts:
            continue
        for node in ast.walk(tree(path)):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in MAKERS:
                    found.append(f"{path.relative_to(root)}:{node.lineno} makes a {name}")
    return found


def test_chart_points_and_lines_are_made_only_in_app_context() -> None:
    assert _made_outside_context() == []


def test_the_check_names_a_point_made_elsewhere(tmp_path: Path) -> None:
    (tmp_path / "app" / "session").mkdir(parents=True)
    (tmp_path / "app" / "context").mkdir()
    (tmp_path / "widgets").mkdir()
    (tmp_path / "app" / "session" / "s.py").write_text("ev.ChartPointEvent(tokens=1, kind='call')\n")
    (tmp_path / "app" / "context" / "e.py").write_text("ChartPointEvent(tokens=1, kind='call')\n")
    assert _made_outside_context(tmp_path) == ["app/session/s.py:1 makes a ChartPointEvent"]

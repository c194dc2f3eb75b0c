"""The dashboard's CSS is parsed once and kept (app/surfaces/dashboard/kept_stylesheet.py): a
second start draws its first frame parsing no CSS, every widget styled as the parse styles it,
and a kept file that is not what tidegauge wrote is never run nor believed."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from textual.css.model import RuleSet
from textual.css.stylesheet import Stylesheet
from textual.widget import Widget

from app.surfaces.dashboard import kept_stylesheet
from app.surfaces.dashboard.app import CSS_FILE
from app.surfaces.dashboard.kept_stylesheet import HEADER, KeptRules, KeptStylesheet, textual_stamp

ROOT = Path(__file__).resolve().parents[1]

AT_FIRST_FRAME = """\
import json, sys
from benchmarks._first_frame import run_cli_headless
import app.surfaces.dashboard.app as tui

# The session process the dashboard starts after its first frame would only be started and stopped
# (one built before the frame still is).
build = tui.TidegaugeApp._build_session
tui.TidegaugeApp._build_session = lambda app: None if getattr(app, "_first_frame_seen", False) else build(app)

def report(app):
    styles = {f"{i}:{type(node).__name__}": node.styles.css for i, node in enumerate(app.screen.walk_children())}
    print("KEPT " + json.dumps({"parsed": app.stylesheet.kept.parsed, "styles": styles}), flush=True)
    app.exit(0)

sys.exit(run_cli_headless([], report))
"""


def _first_frame(tmp_path: Path) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and not k.startswith("TIDEGAUGE_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(TIDEGAUGE_CONFIG_DIR=str(tmp_path / "config"), TIDEGAUGE_DATA_DIR=str(tmp_path / "data"),
               PYTHONPATH=str(ROOT), TERM="xterm-256color")
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", AT_FIRST_FRAME], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    marks = [line for line in proc.stdout.splitlines() if line.startswith("KEPT ")]
    assert proc.returncode == 0 and marks, proc.stderr[-800:]
    return json.loads(marks[0][len("KEPT "):])


def test_a_second_start_parses_no_css_and_styles_every_widget_as_the_parse_does(tmp_path: Path) -> None:
    path = kept_stylesheet.cache_path()
    first = _first_frame(tmp_path)  # parses what no earlier start kept (all of it, if none did)
    second = _first_frame(tmp_path)
    assert Path(path).is_file()
    assert second["parsed"] == 0
    assert second["styles"] == first["styles"] and len(first["styles"]) > 10  # type: ignore[arg-type]


def _sources() -> list[tuple[str, tuple[str, str], bool, int, str]]:
    """The dashboard's stylesheet and the default CSS of every widget it may show: Textual's and tidegauge's."""
    import importlib
    import pkgutil

    import textual.widgets
    import widgets

    for package in (textual.widgets, widgets):
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")
    sources = [(CSS_FILE.read_text(), (str(CSS_FILE), ""), False, 0, "")]
    classes: list[type[Widget]] = [Widget]
    while classes:
        widget_class = classes.pop()
        classes.extend(widget_class.__subclasses__())
        if "DEFAULT_CSS" in widget_class.__dict__ and widget_class.DEFAULT_CSS.strip():
            sources.append((widget_class.DEFAULT_CSS, ("", f"{widget_class.__name__}.DEFAULT_CSS"), True, 0,
                            widget_class.__name__))
    return sources


def _described(rule: RuleSet) -> tuple[object, ...]:
    """All a rule says; a layout by its name (Textual's layouts have no equality of their own)."""
    declared = {name: getattr(value, "name", value) if name == "layout" else value
                for name, value in rule.styles.get_rules().items()}
    return (rule.selectors, [selectors.specificity for selectors in rule.selector_set], declared,
            rule.selector_names, rule.pseudo_classes, rule.is_default_rules, rule.tie_breaker, rule.errors)


def test_every_widgets_rules_come_back_from_the_kept_file_as_parsed(tmp_path: Path) -> None:
    """What the unpickler may build covers every rule a widget's CSS parses to: a Textual that
    builds rules from something new fails here, not silently on every start."""
    from textual.app import App

    variables = App().get_css_variables()  # the default theme's, as the dashboard's
    sources = _sources()
    assert len(sources) > 40
    written = KeptRules(str(tmp_path / "kept.pickle"))
    parsing = KeptStylesheet(written, variables=variables)
    for css, read_from, is_default, tie_breaker, scope in sources:
        parsing._parse_rules(css, read_from, is_default, tie_breaker, scope)
    assert written.parsed == len(sources)
    written.save()
    read = KeptRules(str(tmp_path / "kept.pickle"))
    reading = KeptStylesheet(read, variables=variables)
    for css, read_from, is_default, tie_breaker, scope in sources:
        kept = reading._parse_rules(css, read_from, is_default, tie_breaker, scope)
        parsed = Stylesheet(variables=variables)._parse_rules(css, read_from, is_default, tie_breaker, scope)
        assert [_described(rule) for rule in kept] == [_described(rule) for rule in parsed], read_from
    assert read.parsed == 0


class _RunsCode:
    """What a planted pickle would do: call something (here, write a file) when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (Path.write_text, (str(self.marker), "ran"))


def _plant(path: Path, sources: object, stamp: object = None) -> None:
    payload = {"textual": textual_stamp() if stamp is None else stamp, "variables": Stylesheet()._variables,
               "sources": sources}
    path.write_bytes(HEADER + pickle.dumps(payload))


def test_a_planted_file_that_would_run_code_is_not_run_and_the_css_is_parsed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    css = "Widget { color: red; }"
    key = (css, ("", "planted"), False, 0, "")
    # Both places it could hide: the file's index, and one source's rules.
    (tmp_path / "outer.pickle").write_bytes(HEADER + pickle.dumps(_RunsCode(marker)))
    _plant(tmp_path / "inner.pickle", {key: pickle.dumps(_RunsCode(marker))})
    for name in ("outer.pickle", "inner.pickle"):
        kept = KeptRules(str(tmp_path / name))
        rules = KeptStylesheet(kept)._parse_rules(*key)
        assert not marker.exists(), name
        assert kept.parsed == 1 and [rule.css for rule in rules] == ["Widget {\n    color: #FF0000;\n}"]


@pytest.mark.parametrize("damage", ["no header", "truncated", "another textual", "oversized", "not a mapping"])
def test_a_file_tidegauge_did_not_write_for_this_textual_is_not_believed(tmp_path: Path, damage: str) -> None:
    css = "Widget { color: red; }"
    key = (css, ("", "source"), False, 0, "")
    path = tmp_path / "kept.pickle"
    KeptStylesheet(written := KeptRules(str(path)))._parse_rules(*key)
    written.save()
    data = path.read_bytes()
    if damage == "no header":
        path.write_bytes(data[len(HEADER):])
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "another textual":
        _plant(path, {key: pickle.dumps([])}, stamp=((0, 0),))
    elif damage == "oversized":
        with open(path, "ab") as file:
            file.truncate(kept_stylesheet.MAX_BYTES + 1)  # sparse: no 4 MB written
    else:
        path.write_bytes(HEADER + pickle.dumps(["a", "list"]))
    kept = KeptRules(str(path))
    rules = KeptStylesheet(kept)._parse_rules(*key)
    assert kept.parsed == 1 and [rule.css for rule in rules] == ["Widget {\n    color: #FF0000;\n}"]


def test_nothing_is_written_where_python_writes_no_bytecode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    kept = KeptRules(str(tmp_path / "kept.pickle"))
    KeptStylesheet(kept)._parse_rules("Widget { color: red; }", ("", "source"), False, 0, "")
    kept.save()
    assert kept.parsed == 1 and not (tmp_path / "kept.pickle").exists()


def test_sources_no_longer_asked_for_leave_the_file_once_it_holds_too_many(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kept_stylesheet, "MAX_ENTRIES", 2)
    path = str(tmp_path / "kept.pickle")
    keys = [(f"Widget {{ width: {width}; }}", ("", f"source {width}"), False, 0, "") for width in (1, 2, 3)]
    earlier = KeptRules(path)
    for key in keys[:2]:  # an older stylesheet's two sources
        KeptStylesheet(earlier)._parse_rules(*key)
    earlier.save()
    later = KeptRules(path)
    for key in (keys[0], keys[2]):  # one still asked for, one new: three held, over the limit
        KeptStylesheet(later)._parse_rules(*key)
    assert later.parsed == 1
    later.save()
    last = KeptRules(path)
    for key in keys:
        KeptStylesheet(last)._parse_rules(*key)
    assert last.parsed == 1  # keys[1], left out: the only one parsed again


_THEMED_RULE = ("Widget { color: $primary; }", ("", "source"), False, 0, "")


def _kept_after_a_start(tmp_path: Path) -> tuple[str, dict[str, str], dict[str, str]]:
    """A kept file holding one themed rule parsed under the default theme: its path, the default
    theme's variables and a chosen theme's."""
    from textual.app import App

    path = str(tmp_path / "kept.pickle")
    start, chosen = App().get_css_variables(), {**App().get_css_variables(), "primary": "#ff0000"}
    first = KeptRules(path)
    KeptStylesheet(first, variables=start)._parse_rules(*_THEMED_RULE)
    first.save()
    return path, start, chosen


def test_a_theme_chosen_after_the_start_leaves_the_starts_rules_kept(tmp_path: Path) -> None:
    path, start, chosen = _kept_after_a_start(tmp_path)
    key = _THEMED_RULE
    later = KeptRules(path)
    stylesheet = KeptStylesheet(later, variables=start)
    stylesheet._parse_rules(*key)
    stylesheet.set_variables(chosen)  # the palette's theme, then a dialog's CSS parsed under it
    stylesheet._parse_rules(*key)
    stylesheet._parse_rules("Button { color: $primary; }", ("", "dialog"), False, 0, "")
    later.save()
    next_start = KeptRules(path)
    KeptStylesheet(next_start, variables=start)._parse_rules(*key)
    assert (later.parsed, next_start.parsed) == (2, 0)


def test_a_second_dashboard_of_the_process_takes_the_rules_unpickled_once_in_a_list_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, start, chosen = _kept_after_a_start(tmp_path)
    key = _THEMED_RULE
    kept = KeptRules(path)
    unpickled: list[bytes] = []
    unpickle = kept_stylesheet._unpickle

    def counted(data: bytes) -> object:
        unpickled.append(data)
        return unpickle(data)

    monkeypatch.setattr(kept_stylesheet, "_unpickle", counted)
    one, two = KeptStylesheet(kept, variables=start), KeptStylesheet(kept, variables=start)
    rules_one, rules_two = one._parse_rules(*key), two._parse_rules(*key)
    assert len(unpickled) == 1 and kept.parsed == 0
    assert rules_one is not rules_two and [_described(r) for r in rules_one] == [_described(r) for r in rules_two]
    rules_one.clear()  # one stylesheet's list changed: not the next one's
    two.set_variables(chosen)  # a theme chosen in one dashboard: parsed for it, the other's kept
    assert "color(255, 0, 0)" in str(_described(two._parse_rules(*key)[0])).lower() and kept.parsed == 1
    assert [_described(r) for r in KeptStylesheet(kept, variables=start)._parse_rules(*key)] == \
        [_described(r) for r in rules_two]

"""`tidegauge whatif --plot FILE`: the curves drawn with matplotlib, as SVG or PNG.

matplotlib is an optional extra (`pip install 'tidegauge[plot]'`, ~60 MB with numpy) and
takes a while to import, so this module is imported only when ``--plot`` is given; nothing
at start-up reaches it. The threshold lines are drawn as the gauge draws them: warning in
its amber, auto-compact in its red, blocking in its dark red, each policy's in its colour.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from app.session.whatif import WhatIfCurve

# The gauge's colours (styles/tidegauge.tcss: $warning, $error, $error-darken-2 of the default theme).
WARNING_COLOUR = "#ffa62b"
COMPACT_COLOUR = "#ba3c5b"
BLOCKING_COLOUR = "#7a1f35"
RECORDED_COLOUR = "#1f2937"
POLICY_COLOURS = ("#0178d4", "#2e8b57", "#9b59b6", "#d35400", "#008b8b", "#7f8c8d")


class PlotError(Exception):
    """The plot cannot be made; one line saying why."""


def write_plot(path: Path, curves: Sequence[WhatIfCurve], title: str) -> None:
    """Draw ``curves`` (the recorded one first) into ``path``; the format is its extension's."""
    try:
        # Inside the try: a missing matplotlib is a PlotError, one line, not a traceback.
        import matplotlib

        matplotlib.use("Agg")  # no display: a file only
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError("--plot needs matplotlib: pip install 'tidegauge[plot]' (or matplotlib==3.11.2)") from None
    figure, axes = plt.subplots(figsize=(10, 6.5), dpi=110)
    try:
        for index, curve in enumerate(curves):
            recorded = index == 0
            colour = RECORDED_COLOUR if recorded else POLICY_COLOURS[(index - 1) % len(POLICY_COLOURS)]
            xs = [n for n, _ in curve.points]
            ys = [t for _, t in curve.points]
            label = (f"{curve.name}: {curve.compactions} compaction{'s' if curve.compactions != 1 else ''}, "
                     f"peak {curve.peak_tokens:,}")
            axes.plot(xs, ys, color=colour, linewidth=2.4 if recorded else 1.6, label=label,
                      linestyle="-" if recorded else (0, (5, 1)), zorder=3 if recorded else 2)
            # each policy's auto-compact line in its colour; the recorded run's lines in the gauge's colours
            if recorded:
                for value, colour_of_line, name in ((curve.warning_line, WARNING_COLOUR, "warning"),
                                                    (curve.auto_compact_line, COMPACT_COLOUR, "auto-compact"),
                                                    (curve.blocking_line, BLOCKING_COLOUR, "blocking")):
                    if value:
                        axes.axhline(value, color=colour_of_line, linestyle="--", linewidth=1.2,
                                     label=f"recorded {name} line {value:,}")
            elif curve.auto_compact_line:
                axes.axhline(curve.auto_compact_line, color=colour, linestyle=":", linewidth=1.2,
                             label=f"{curve.name}: auto-compact line {curve.auto_compact_line:,}")
        axes.set_xlabel("model call")
        axes.set_ylabel("context (tokens)")
        axes.set_title(title)
        axes.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{int(v):,}"))
        axes.set_ylim(bottom=0)
        axes.grid(True, alpha=0.25)
        # below the axes: a legend inside would hide the curves it explains
        axes.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
        figure.tight_layout()
        try:
            figure.savefig(path, format=path.suffix.lower().lstrip("."))
        except OSError as err:
            raise PlotError(f"--plot: cannot write {path}: {err.strerror or err}") from None
    finally:
        plt.close(figure)

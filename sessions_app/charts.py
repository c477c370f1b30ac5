"""The health-over-time chart, drawn on the server as inline SVG (no script, no CDN).

Only numbers computed here reach the SVG's geometry; labels go through the template's
escaping, so nothing from a store or a user can inject markup.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Sum

from .models import FindingSnapshot, HealRun

WIDTH, HEIGHT, PAD_LEFT, PAD_BOTTOM, PAD_TOP, PAD_RIGHT = 720, 220, 44, 28, 10, 40
SEVERITIES = ("critical", "warning", "info")
OFFSET = 3  # px between lines of equal counts (stroke 2 px)
MAX_POINTS = 200


@dataclass
class Series:
    name: str
    points: str  # "x,y x,y ..." in SVG user units
    dots: list[tuple[float, float, int]] = field(default_factory=list)  # x, y, value
    last: int = 0


@dataclass
class Chart:
    width: int = WIDTH
    height: int = HEIGHT
    plot_left: int = PAD_LEFT
    plot_bottom: int = HEIGHT - PAD_BOTTOM
    series: list[Series] = field(default_factory=list)
    x_labels: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, int]] = field(default_factory=list)
    passes: int = 0
    legend: list[Series] = field(default_factory=list)  # the series, most severe first


def health_chart(profile_key: str) -> Chart:
    """Finding counts per severity at each full check pass that covered the profile.

    Passes come from finished whole runs (not ``--only`` or single repairs) whose
    report includes the profile; a pass without snapshots for a severity counts 0.
    """
    runs = [
        run for run in HealRun.objects.filter(status=HealRun.Status.DONE, plans=[], only=[], mode__in=("check", "apply"))
        .filter(report__isnull=False).order_by("-finished_at", "-pk").only("id", "finished_at", "checked_profiles")
        [: MAX_POINTS * 3]
        if profile_key in run.checked_profiles
    ][:MAX_POINTS]
    runs.reverse()
    chart = Chart(passes=len(runs))
    if not runs:
        return chart
    totals = {
        (row["run_id"], row["severity"]): row["total"]
        for row in FindingSnapshot.objects.filter(profile=profile_key, run__in=runs)
        .values("run_id", "severity").annotate(total=Sum("count"))
    }
    values = {sev: [totals.get((run.pk, sev), 0) for run in runs] for sev in SEVERITIES}
    top = max(1, *(max(v) for v in values.values()))
    plot_w = WIDTH - PAD_LEFT - PAD_RIGHT  # room for the last time label
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP

    def x_of(i: int) -> float:
        return round(PAD_LEFT + (plot_w * i / (len(runs) - 1) if len(runs) > 1 else plot_w / 2), 1)

    def y_of(v: int) -> float:
        return round(HEIGHT - PAD_BOTTOM - plot_h * v / top, 1)

    # Drawn info first, critical last. Where counts coincide, a lesser line is drawn
    # OFFSET px lower per worse line on the same count, so it shows beside the line
    # over it instead of hidden under it (its dots' titles and the legend give the count).
    for sev in reversed(SEVERITIES):
        worse = SEVERITIES[:SEVERITIES.index(sev)]
        dots = [(x_of(i), round(y_of(v) + OFFSET * sum(values[w][i] == v for w in worse), 1), v)
                for i, v in enumerate(values[sev])]
        chart.series.append(Series(sev, " ".join(f"{x},{y}" for x, y, _ in dots), dots, values[sev][-1]))
    chart.legend = [next(x for x in chart.series if x.name == sev) for sev in SEVERITIES]
    step = max(1, len(runs) // 6)
    labels: list[tuple[float, str]] = []
    for i in range(0, len(runs), step):
        text = runs[i].finished_at.strftime("%m-%d %H:%M")
        if not labels or labels[-1][1] != text:  # passes within one minute share a label
            labels.append((x_of(i), text))
    chart.x_labels = labels
    chart.y_ticks = [(y_of(v), v) for v in sorted({0, top // 2, top})]
    return chart


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    value: float


@dataclass
class BarChart:
    """Bars over evenly spaced buckets (the usage page); same geometry rules as
    :class:`Chart`: only numbers computed here reach the SVG."""

    width: int = WIDTH
    height: int = HEIGHT
    plot_left: int = PAD_LEFT
    plot_bottom: int = HEIGHT - PAD_BOTTOM
    bars: list[Bar] = field(default_factory=list)
    x_labels: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    metric: str = ""
    empty: bool = True


def _tick(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:,.1f}M"
    if value >= 10_000:
        return f"{value / 1000:,.0f}k"
    if value and value < 10:
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{value:,.0f}"


def bar_chart(points: list[tuple[str, str, float | None]], metric: str) -> BarChart:
    """``points``: ``(axis label, full label, value)`` per bucket, oldest first
    (None counts 0). Up to ``MAX_BARS`` bars are drawn, the newest kept."""
    points = points[-MAX_BARS:]
    chart = BarChart(metric=metric)
    if not points:
        return chart
    values = [float(v or 0) for _, _, v in points]
    top = max(values)
    chart.empty = top <= 0
    top = top or 1.0
    plot_w = WIDTH - PAD_LEFT - PAD_RIGHT
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    slot = plot_w / len(points)
    width = max(1.0, round(slot * 0.8, 2))
    for i, ((_, label, _), value) in enumerate(zip(points, values)):
        height = round(plot_h * value / top, 1)
        chart.bars.append(Bar(round(PAD_LEFT + slot * i + (slot - width) / 2, 1),
                              round(HEIGHT - PAD_BOTTOM - height, 1), width, height, label, value))
    step = max(1, len(points) // 6)
    chart.x_labels = [(round(PAD_LEFT + slot * i + slot / 2, 1), points[i][0]) for i in range(0, len(points), step)]
    chart.y_ticks = [(round(HEIGHT - PAD_BOTTOM - plot_h * v / top, 1), _tick(v)) for v in (0, top / 2, top)]
    return chart


MAX_BARS = 400

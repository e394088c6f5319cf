"""The SVG line charts of the model's metadata: valid SVG, points inside the plot box, the
axis ranges as labels, robust to one point, no point and NaN."""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET

from assets.lifecycle.plots import (
    HEIGHT,
    INLINE_MARKDOWN_CHARS,
    MARGIN_BOTTOM,
    MARGIN_LEFT,
    MARGIN_RIGHT,
    MARGIN_TOP,
    WIDTH,
    LossCurve,
    chart_markdown,
    line_chart_svg,
    svg_markdown,
    thin,
)

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def test_points_are_scaled_into_the_plot_box_with_the_ranges_as_labels() -> None:
    points = [(1, 0.9), (2, 0.5), (3, float("nan")), (4, 0.25)]
    root = parse(line_chart_svg(points, title="loss <per epoch>", x_label="epoch"))
    line = root.find(f"{SVG}polyline")
    coords = [tuple(map(int, p.split(","))) for p in line.get("points").split()]
    assert len(coords) == 3  # the NaN point is left out
    xs, ys = zip(*coords, strict=True)
    assert min(xs) == MARGIN_LEFT and max(xs) == WIDTH - MARGIN_RIGHT
    assert min(ys) == MARGIN_TOP and max(ys) == HEIGHT - MARGIN_BOTTOM
    assert ys[0] == MARGIN_TOP and ys[-1] == HEIGHT - MARGIN_BOTTOM  # falling loss: down
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert {"0.9", "0.25", "1", "epoch 4", "loss <per epoch>"} <= set(texts)


def test_one_point_is_a_dot_and_none_says_so() -> None:
    dot = parse(line_chart_svg([(1, 2.0)], title="t", x_label="x"))
    assert dot.find(f"{SVG}circle") is not None and dot.find(f"{SVG}polyline") is None
    empty = parse(line_chart_svg([(1, float("nan"))], title="t", x_label="x"))
    assert "no data yet" in [t.text for t in empty.iter(f"{SVG}text")]


def test_markdown_embeds_the_svg_as_a_data_uri() -> None:
    svg = line_chart_svg([(0, 1), (1, 0)], title="t", x_label="x")
    markdown = svg_markdown(svg, "loss")
    found = re.fullmatch(r"!\[loss\]\(data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)\)", markdown)
    assert found and base64.b64decode(found.group(1)).decode() == svg


def test_the_loss_curve_stays_bounded_and_keeps_the_mean() -> None:
    curve = LossCurve(window=2, max_points=8)
    for step in range(1, 101):
        curve(step, float(step))
    assert len(curve.points) <= 8 and curve.window > 2
    steps = [s for s, _ in curve.points]
    assert steps == sorted(steps) and steps[-1] <= 100
    # each point is the mean of the losses of its window (here the mean of its steps)
    last_step, last_mean = curve.points[-1]
    assert last_mean == sum(range(last_step - curve.window + 1, last_step + 1)) / curve.window


def test_a_long_curve_is_thinned_into_a_picture_the_ui_shows_inline() -> None:
    # Dagster's UI shows markdown values shorter than 1,000 characters without a click
    curve = [(step, 5.0 / (1 + step / 300) + 0.01 * (step % 7)) for step in range(1, 20_001, 50)]
    markdown = chart_markdown(curve, title="training loss", x_label="step", alt="loss curve")
    assert len(markdown) < INLINE_MARKDOWN_CHARS
    svg = base64.b64decode(markdown.split("base64,")[1].rstrip(")")).decode()
    root = parse(svg)
    drawn = root.find(f"{SVG}polyline").get("points").split()
    assert 8 <= len(drawn) < len(curve)
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert {"1", "step 19,951"} <= set(texts)  # the x axis keeps the first and last step


def test_thinning_averages_runs_and_keeps_their_last_x() -> None:
    points = [(x, float(x)) for x in range(1, 11)]
    assert thin(points, 20) == points
    assert thin(points, 5) == [(1.5, 1.5), (3.5, 3.5), (5.5, 5.5), (7.5, 7.5), (9.5, 9.5)]
    assert len(thin(points, 3)) == 3


def test_the_loss_chart_spans_every_step_of_the_run() -> None:
    """738 steps: the axis goes from step 1 to step 738 (it went from 2 to 737: the first
    window's end, and the last full window, the partial one at the end left out)."""
    curve = LossCurve(window=1, max_points=400)
    for step in range(1, 739):
        curve(step, 1.0 + 1.0 / step)
    points = curve.curve()
    assert points[-1][0] == 738 and points[0][0] > 1  # (windows of 2 steps after merging)
    markdown = chart_markdown(points, title="loss", x_label="step", alt="loss", x_start=1)
    svg = base64.b64decode(markdown.split("base64,")[1].rstrip(")")).decode()
    texts = [t.text for t in parse(svg).iter(f"{SVG}text")]
    assert {"1", "step 738"} <= set(texts)

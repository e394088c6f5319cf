"""The SVG line charts of the model's metadata: valid SVG, points inside the plot box, the
axis ranges as labels, robust to one point, no point and NaN."""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET

from assets.plots import (
    HEIGHT,
    MARGIN_BOTTOM,
    MARGIN_LEFT,
    MARGIN_RIGHT,
    MARGIN_TOP,
    WIDTH,
    LossCurve,
    line_chart_svg,
    svg_markdown,
)

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def test_points_are_scaled_into_the_plot_box_with_the_ranges_as_labels() -> None:
    points = [(1, 0.9), (2, 0.5), (3, float("nan")), (4, 0.25)]
    root = parse(line_chart_svg(points, title="loss <per epoch>", x_label="epoch"))
    line = root.find(f"{SVG}polyline")
    coords = [tuple(map(float, p.split(","))) for p in line.get("points").split()]
    assert len(coords) == 3  # the NaN point is left out
    xs, ys = zip(*coords, strict=True)
    assert min(xs) == MARGIN_LEFT and max(xs) == WIDTH - MARGIN_RIGHT
    assert min(ys) == MARGIN_TOP and max(ys) == HEIGHT - MARGIN_BOTTOM
    assert ys[0] == MARGIN_TOP and ys[-1] == HEIGHT - MARGIN_BOTTOM  # falling loss: down
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert {"0.9", "0.25", "1", "4", "epoch", "loss <per epoch>"} <= set(texts)


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

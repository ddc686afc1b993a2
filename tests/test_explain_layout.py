"""The explain page's graph layout (hetgen/runtime/explain_layout.py) and what the page and the text
say with it (issue 23, item 7): boxes never overlap, every edge runs rightwards through the gaps and
past other boxes at its own slot, skip connections of a U-Net are routed round the chain, the
layout is deterministic and bounded; the page's header and timeline read one total, its timelines
have axes, its tooltips name the runner-up; devices have one colour in the page and the text."""

from __future__ import annotations

import random
import re
import time
from html.parser import HTMLParser
from pathlib import Path

import onnx
import pytest

from hetgen.frontend import import_model
from hetgen.models.cnn import unet
from hetgen.partition.explain import ansi, device_colours, explain_json, explain_text
from hetgen.partition.search import place
from hetgen.platform.loader import load_platform
from hetgen.runtime.explain_html import explain_html
from hetgen.runtime.explain_layout import MAX_DUMMIES, Geometry, layered_layout

REPO = Path(__file__).resolve().parent.parent
G = Geometry()


def random_dag(n: int, seed: int, far: int = 8) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    edges = set()
    for v in range(1, n):
        for _ in range(rng.randrange(1, 3)):
            edges.add((rng.randrange(max(0, v - far), v), v))
    return sorted(edges)


def unet_edges() -> tuple[int, list[tuple[int, int]]]:
    graph = import_model(unet())
    producer = {out: i for i, node in enumerate(graph.nodes) for out in node.outputs if out}
    edges = {(producer[t], i) for i, node in enumerate(graph.nodes) for t in node.inputs if t in producer}
    return len(graph.nodes), sorted(edges)


def overlaps(a, b) -> bool:
    (ax, ay), (bx, by) = a, b
    return ax < bx + G.box_w and bx < ax + G.box_w and ay < by + G.box_h and by < ay + G.box_h


def check(n: int, edges: list[tuple[int, int]], band_layers: int | None) -> None:
    layout = layered_layout(n, edges, G, band_layers)
    boxes = layout.boxes
    for i in range(n):  # no two boxes overlap, all inside the drawing
        x, y = boxes[i]
        assert 0 <= x and x + G.box_w <= layout.width and 0 <= y and y + G.box_h <= layout.height
        for j in range(i):
            assert not overlaps(boxes[i], boxes[j]), (i, j)
    assert all(layout.layer[b] > layout.layer[a] for a, b in edges)  # layering respects every edge
    assert sorted((a, b) for a, b, _ in layout.edges) == sorted(edges)  # every edge drawn, once
    assert layout.direct_edges == 0
    for a, b, segments in layout.edges:
        # the path is connected, from a's right side to b's left side
        assert segments[0][1:3] == (boxes[a][0] + G.box_w, boxes[a][1] + G.box_h / 2)
        assert segments[-1][-2:] == (boxes[b][0], boxes[b][1] + G.box_h / 2)
        for seg, following in zip(segments, segments[1:]):
            assert seg[-2:] == following[1:3]
        for seg in segments:
            x1, y1, x2, y2 = seg[1], seg[2], seg[-2], seg[-1]
            lo_x, hi_x = min(x1, x2), max(x1, x2)
            for k, (bx, by) in enumerate(boxes):
                if seg[0] == "C":  # a curve stays in the gap between layer columns: no box shares its x span
                    assert not (lo_x < bx + G.box_w and bx < hi_x), (a, b, k, seg)
                else:  # a straight run (through a layer column, or along a wrap lane) passes no box
                    assert y1 == y2
                    assert not (lo_x < bx + G.box_w and bx < hi_x and by <= y1 <= by + G.box_h), (a, b, k, seg)


@pytest.mark.parametrize("seed", range(6))
def test_random_dags_are_drawn_without_overlaps_and_edges_route_round_boxes(seed):
    check(40 + 10 * seed, random_dag(40 + 10 * seed, seed), band_layers=(None, 4, 7)[seed % 3])


def test_unet_skip_connections_are_routed_round_the_chain():
    n, edges = unet_edges()
    check(n, edges, band_layers=10)
    layout = layered_layout(n, edges, G, 10)
    skips = [segments for a, b, segments in layout.edges if layout.layer[b] - layout.layer[a] > 1]
    assert len(skips) >= 3  # the U-Net's skip connections: each passes layers at a slot of its own
    assert all(sum(seg[0] == "L" for seg in segments) >= 1 for segments in skips)
    assert layout.width <= 2 * G.margin + G.wrap_room + 10 * (G.box_w + G.layer_gap)  # bands: the page's width


def test_layout_is_deterministic_and_bounded():
    rng = random.Random(1)  # a 5,000-layer chain with skips up to 2,000 layers long: past the dummy cap
    edges = sorted(
        {(v - 1, v) for v in range(1, 5000)} | {(rng.randrange(max(0, v - 2000), v), v) for v in range(1, 5000)}
    )
    start = time.process_time()
    first = layered_layout(5000, edges, G, 10)
    spent = time.process_time() - start
    n, small = unet_edges()
    assert layered_layout(n, small, G, 10) == layered_layout(n, small, G, 10)
    assert spent < 10, spent  # measured 0.4 s: dummy slots are capped
    assert first.direct_edges > 0 and sum(len(s) for _, _, s in first.edges) < 3 * MAX_DUMMIES + 10 * len(edges)


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.summary = ""
        self.headings: list[str] = []
        self.axes: list[dict] = []
        self.ticks = 0
        self.tips: dict[str, str] = {}
        self.fills: dict[str, str] = {}
        self.bars: list[dict] = []
        self._text: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id") == "summary" or tag == "h2":
            self._text = tag
        if tag == "g" and a.get("class") == "axis":
            self.axes.append(a)
        if tag == "text" and a.get("class") == "tick-label":
            self.ticks += 1
        if tag == "rect" and "bar" in (a.get("class") or "").split():
            self.bars.append(a)
        if tag == "g" and a.get("class") == "node":
            self.tips[a["data-name"]] = a["data-tip"]
            self.fills[a["data-device"]] = a["data-colour"]

    def handle_data(self, data):
        if self._text == "p":
            self.summary += data
        elif self._text == "h2":
            self.headings.append(data)
        self._text = None


@pytest.fixture(scope="module")
def resnet():
    graph = import_model(onnx.load(REPO / "examples" / "resnet_tiny.onnx"))
    platform = load_platform(str(REPO / "platforms" / "soc.yaml"))
    return graph, platform, place(graph, platform)


def test_the_page_reads_one_total_with_axes_runner_ups_and_the_texts_colours(resnet):
    graph, platform, placement = resnet
    page = Page()
    page.feed(explain_html(placement, graph, platform))
    total = f"{explain_json(placement, graph)['total_us']:.1f}"
    assert f": {total} us estimated" in page.summary
    timeline = [h for h in page.headings if h.startswith("Timeline")]
    assert timeline == [f"Timeline as the cost model prices it: {total} us"]
    assert [a["data-end"] for a in page.axes] == [total] and page.ticks >= 4
    lanes: dict[str, list[tuple[float, float]]] = {}
    for bar in page.bars:  # one thing at a time on each lane: the interpreter's clocks
        lanes.setdefault(bar["data-lane"], []).append((float(bar["x"]), float(bar["x"]) + float(bar["width"])))
    assert len(lanes) >= 3
    for spans in lanes.values():
        spans.sort()
        assert all(end <= start + 1.01 for (_, end), (start, _) in zip(spans, spans[1:]))  # bars are >= 1 px
    runner_ups = [tip for tip in page.tips.values() if "runner-up" in tip]
    assert runner_ups and all(re.search(r"runner-up \S+ \[.*\] [\d.]+ us \([+-][\d.]+ us\): \S", t) for t in runner_ups)
    colours = device_colours(placement.targets())
    assert page.fills == colours and len(set(colours.values())) == len(colours) >= 2
    text = explain_text(placement, graph, colour=True)
    assert all(ansi(target, colour) in text for target, colour in colours.items())
    assert "\033" not in explain_text(placement, graph)

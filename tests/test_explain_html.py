"""`hetgen explain --format html` (issue 8 item 7, issue 23 item 7): one self-contained page, rendered
by a real headless browser (Debian's chromium), and checked for what it draws after its script ran:
one coloured box per operator (no two overlapping), every edge, a legend per device, timeline bars
per device as priced and as simulated on time axes, one total in the header and the timeline, and
tooltips that name the runner-up."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetgen.frontend import import_model
from hetgen.models.cnn import unet
from hetgen.names import html_script_json, html_text
from hetgen.partition.search import place
from hetgen.platform.loader import load_platform
from hetgen.runtime.explain_html import explain_html

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / "examples" / "resnet_tiny.onnx"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (`apt-get install chromium`, as .ci/run does)"
)


class Drawn(HTMLParser):
    """The elements of a rendered DOM that say what is drawn."""

    def __init__(self):
        super().__init__()
        self.nodes: list[dict] = []  # graph boxes, with their rect's fill and geometry
        self.edges: list[dict] = []
        self.bars: list[dict] = []
        self.axes: list[dict] = []  # per timeline: its axis, with its tick labels
        self.headings: list[str] = []
        self.summary = ""
        self._text: str | None = None
        self.legend: list[str] = []
        self.body: dict = {}
        self.tags: list[str] = []
        self.external: list[str] = []
        self._svg: str | None = None
        self._in_node = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        for key in ("src", "href"):
            if a.get(key):
                self.external.append(a[key])
        if tag == "body":
            self.body = a
        elif tag == "svg":
            self._svg = a.get("id")
        elif tag == "g" and "node" in (a.get("class") or "").split():
            self.nodes.append(dict(a))
            self._in_node = True
        elif tag == "rect" and self._in_node:
            self.nodes[-1].update(fill=a.get("fill"), box=tuple(float(a[k]) for k in ("x", "y", "width", "height")))
            self._in_node = False
        elif tag == "path" and "edge" in (a.get("class") or "").split():
            self.edges.append(a)
        elif tag == "g" and a.get("class") == "axis":
            self.axes.append({**a, "timeline": self._svg, "ticks": []})
        elif tag == "text" and a.get("class") == "tick-label":
            self._text = "tick"
        elif tag == "h2" or a.get("id") == "summary":
            self._text = tag
        elif tag == "rect" and "bar" in (a.get("class") or "").split():
            self.bars.append({**a, "timeline": self._svg})
        elif tag == "span" and "device" in (a.get("class") or "").split():
            self.legend.append(a.get("data-device"))

    def handle_data(self, data):
        if self._text == "tick":
            self.axes[-1]["ticks"].append(data)
        elif self._text == "h2":
            self.headings.append(data)
        elif self._text == "p":
            self.summary += data
        self._text = None


def rendered(page: Path, tmp_path: Path) -> Drawn:
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    drawn = Drawn()
    drawn.feed(dom.stdout)
    return drawn


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html") / "soc"
    done = subprocess.run(
        [sys.executable, "-m", "hetgen", "soc", str(MODEL), "-o", str(out), "--native-only"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.external
@needs_chromium
def test_the_page_draws_the_graph_by_device_and_both_timelines(built, tmp_path):
    page = tmp_path / "page.html"
    done = subprocess.run(
        [sys.executable, "-m", "hetgen", "explain", "soc", str(MODEL), "--format", "html", "--built", str(built)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    page.write_text(done.stdout)
    graph = import_model(onnx.load(MODEL))
    placement = place(graph, load_platform(str(REPO / "platforms" / "soc.yaml")))
    drawn = rendered(page, tmp_path)

    assert not drawn.external, drawn.external  # self-contained: nothing fetched
    assert drawn.body.get("data-drawn") == str(len(graph.nodes))  # the page's script ran
    # one box per operator, on its device, one colour per device
    assert sorted(n["data-name"] for n in drawn.nodes) == sorted(node.name for node in graph.nodes)
    assert all(n["data-device"] == placement.target_of(n["data-name"]) for n in drawn.nodes)
    colour = {}
    for n in drawn.nodes:
        assert colour.setdefault(n["data-device"], n["fill"]) == n["fill"]
    assert len(set(colour.values())) == len(colour) == len(placement.targets()) >= 2
    assert sorted(drawn.legend) == sorted(placement.targets())  # drawn by the script
    # timelines: bars on every device with work and on its copies' lane, priced and simulated, on axes
    for timeline in ("timeline-model", "timeline-simulated"):
        bars = [b for b in drawn.bars if b["timeline"] == timeline]
        lanes = {b["data-lane"] for b in bars}
        assert set(placement.targets()) | {"soc/vdevice0/npu0 copies", "soc/vdevice0/host copies"} <= lanes, lanes
        kinds = {b["data-kind"] for b in bars if b["data-lane"] == "soc/vdevice0/npu0"}
        assert {"kernel", "launch", "weights"} <= kinds, kinds
        assert {b["data-kind"] for b in bars if b["data-lane"].endswith(" copies")} == {"copy"}
        (axis,) = [a for a in drawn.axes if a["timeline"] == timeline]
        assert len(axis["ticks"]) >= 4 and axis["ticks"][0] == "0"
    # one total: the header's estimate and simulation are where each timeline ends
    model, simulated = (a["data-end"] for a in drawn.axes)
    assert f": {model} us estimated" in drawn.summary and f"; simulated {simulated} us" in drawn.summary
    assert [h for h in drawn.headings if h.startswith("Timeline")] == [
        f"Timeline as the cost model prices it: {model} us",
        f"Timeline as the simulator counted it: {simulated} us",
    ]
    # controllers are not simulated: their groups are drawn at their estimate, and marked so
    simulated_root = {
        b["data-kind"] for b in drawn.bars if b["timeline"] == "timeline-simulated" and b["data-lane"] == "soc"
    }
    assert simulated_root == {"estimate"}


def hostile_model() -> onnx.ModelProto:
    """Names that would break out of HTML text, an attribute or the page's script."""
    evil = "</script><img src=x onerror=alert(1)>&\"'é"
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], [evil + "c"], name=evil, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", [evil + "c"], ["y"], name=evil + "relu"),
    ]
    graph = helper.make_graph(
        nodes,
        evil,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        initializer=[w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_names_are_escaped_for_html():
    assert html_text("a<b>&\"'`é\x00") == "a&#x3c;b&#x3e;&#x26;&#x22;&#x27;&#x60;&#xe9;&#xfffd;"
    assert "<" not in html_script_json({"k": "</script>"}) and "&" not in html_script_json({"k": "&"})
    graph = import_model(hostile_model())
    platform = load_platform(str(REPO / "platforms" / "dual.yaml"))
    page = explain_html(place(graph, platform, mode="greedy"), graph, platform)
    assert "<img" not in page and "</script><" not in page.replace("</script>\n<", "")
    assert re.fullmatch(r"[\x09\x0a\x20-\x7e]*", page)  # ASCII: every other character is a reference


@pytest.mark.external
@needs_chromium
def test_hostile_names_stay_text_in_the_browser(tmp_path):
    graph = import_model(hostile_model())
    page = tmp_path / "page.html"
    platform = load_platform(str(REPO / "platforms" / "dual.yaml"))
    page.write_text(explain_html(place(graph, platform, mode="greedy"), graph, platform))
    drawn = rendered(page, tmp_path)
    assert "img" not in drawn.tags  # the name did not become an element
    assert drawn.body.get("data-drawn") == str(len(graph.nodes))  # and the script still ran
    assert {n["data-name"] for n in drawn.nodes} == {node.name for node in graph.nodes}


@pytest.mark.external
@needs_chromium
def test_a_unet_is_drawn_in_layers_with_its_skip_connections_and_runner_ups(tmp_path):
    graph = import_model(unet())
    platform = load_platform(str(REPO / "platforms" / "soc.yaml"))
    placement = place(graph, platform)
    page = tmp_path / "unet.html"
    page.write_text(explain_html(placement, graph, platform))
    drawn = rendered(page, tmp_path)
    assert drawn.body.get("data-drawn") == str(len(graph.nodes))
    boxes = [n["box"] for n in drawn.nodes]
    assert len(boxes) == len(graph.nodes)
    for k, (x, y, w, h) in enumerate(boxes):  # no two boxes overlap
        for x2, y2, w2, h2 in boxes[:k]:
            assert not (x < x2 + w2 and x2 < x + w and y < y2 + h2 and y2 < y + h)
    producer = {out: node.name for node in graph.nodes for out in node.outputs if out}
    wanted = {(producer[t], node.name) for node in graph.nodes for t in node.inputs if t in producer}
    assert sorted((e["data-from"], e["data-to"]) for e in drawn.edges) == sorted(wanted)  # every edge, once
    width = float(re.search(r'<svg id="graph"[^>]* width="(\d+)"', page.read_text()).group(1))
    assert width <= 1500 and max(x + w for x, _, w, _ in boxes) > width / 2  # uses the page's width
    assert len(drawn.axes) == 1 and len(drawn.axes[0]["ticks"]) >= 4
    tips = [n["data-tip"] for n in drawn.nodes]
    assert sum("runner-up" in tip for tip in tips) >= len(placement.groups) // 2

"""The per-layer yardstick for bench_layers.py: onnxruntime at its defaults on the same layer.

Each layer hetgen times (one kernel call: a convolution with what it fused, e.g. Conv + BatchNorm +
Relu, or Conv + Add + Relu) is cut out of the model as a model of those nodes alone, with the same
shapes, weights and attributes (`onnx.utils.Extractor`), and run by `speed_session` (graph
optimisations on, one intra-op thread, which runs on the calling thread). Timed by the calling
thread's CPU time, as bench_layers.py times hetgen's kernels; the layers are run one after another,
round after round (interleaved: every layer sees the same load), the first round only warming.

A layer alone in a loop keeps its weights and input in the caches, which the model's other layers
would have pushed out: beside hetgen's in-model `% peak` this flatters onnxruntime (compare it with
`alone %` too).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import onnx
from onnx import helper, utils

from hetgen.runtime.reference import speed_session


def between(graph: onnx.GraphProto, names: set[str]) -> list[onnx.NodeProto]:
    """The nodes `names` and every node on a path between two of them, in the graph's order: hetgen
    folds some nodes away before it names its calls (a BatchNorm after a Conv: its call is
    'conv+relu'), and the layer onnxruntime runs must hold them too."""
    after: set[str] = set()  # values computed from the nodes' outputs
    reached = []
    for node in graph.node:
        if node.name in names or any(value in after for value in node.input):
            after.update(node.output)
            reached.append(node)
    before: set[str] = set()  # values the nodes read, directly or not
    chosen = []
    for node in reversed(reached):
        if node.name in names or any(value in before for value in node.output):
            before.update(node.input)
            chosen.append(node)
    return chosen[::-1]


def layer_model(model: onnx.ModelProto, inferred: onnx.ModelProto, names: list[str]) -> onnx.ModelProto | None:
    """The model's nodes `names` (and those between them) alone, or None where one of them is not a
    node of the ONNX model (a node hetgen made): their inputs that no node among them computes and no
    initializer holds become the graph's inputs, the outputs that nothing among them reads its
    outputs."""
    if not names or not set(names) <= {node.name for node in model.graph.node}:
        return None
    chosen = between(model.graph, set(names))
    made = {value for node in chosen for value in node.output if value}
    read = {value for node in chosen for value in node.input if value}
    constants = {init.name for init in model.graph.initializer}
    inputs = sorted({value for value in read if value not in made and value not in constants})
    outputs = [value for node in chosen for value in node.output if value and value not in read]
    try:
        extracted = utils.Extractor(inferred).extract_model(inputs, outputs)
    except Exception:  # a tensor without a known shape: no yardstick for this layer
        return None
    return helper.make_model(extracted.graph, opset_imports=model.opset_import, ir_version=model.ir_version)


def _feeds(session, rng) -> dict[str, np.ndarray] | None:
    feeds = {}
    for value in session.get_inputs():
        if value.type != "tensor(float)" or not all(isinstance(d, int) for d in value.shape):
            return None
        feeds[value.name] = rng.standard_normal(value.shape).astype(np.float32)
    return feeds


def ort_layer_times(model: onnx.ModelProto, layers: list[str], runs: int) -> list[list[int] | None]:
    """Per layer ('conv+batchnormalization+relu', the model's node names joined by '+'): onnxruntime's
    CPU ns per run over `runs` interleaved rounds, or None where the layer cannot be cut out alone."""
    inferred = onnx.shape_inference.infer_shapes(model)
    rng = np.random.default_rng(0)
    prepared: list[tuple | None] = []
    cache: dict[str, tuple | None] = {}
    for layer in layers:
        if layer not in cache:
            alone = layer_model(model, inferred, layer.split("+"))
            session = speed_session(alone.SerializeToString(), threads=1) if alone is not None else None
            feeds = _feeds(session, rng) if session is not None else None
            cache[layer] = (session, feeds) if feeds is not None else None
        prepared.append(cache[layer])
    times: list[list[int]] = [[] for _ in layers]
    for round_ in range(runs + 1):  # the first round warms
        for i, entry in enumerate(prepared):
            if entry is None:
                continue
            session, feeds = entry
            start = time.thread_time_ns()
            session.run(None, feeds)
            if round_:
                times[i].append(time.thread_time_ns() - start)
    return [t if entry is not None else None for t, entry in zip(times, prepared)]


def ort_percent(flops: int, times: list[int] | None, peak: float) -> str:
    """The printed `ort %` cell: onnxruntime's median over the runs against the peak ('-' where none)."""
    return f"{100 * flops / statistics.median(times) / peak:5.0f}%" if times else f"{'-':>6}"

"""hetgen's Ethos-U estimate and simulation beside Arm Vela's, per network and per layer.

    python benchmarks/bench_vela.py [--models mobilenetv2_96,ds_cnn,resnet8] [--platforms corstone-300,ethos-u65]
                                    [--estimate-only] [--keep DIR]

Needs Vela (`pip install ethos-u-vela`, the `vela` extra). For each network, built as a float ONNX
graph with Keras-'same' padding (what TFLite's SAME means, so both files compute the same function)
and quantized by onnxruntime (hetgen/models/quantized.py: QDQ, per-channel int8 weights, int8
activations), the SAME int8 network is written as a TFLite flatbuffer straight from the quantized
ONNX graph (`tflite_from_qdq`: its int8 weights, int32 biases, scales and zero points, NHWC), with
Vela's own generated TFLite schema classes. Then:

- Vela compiles it for the platform's Ethos-U (`--accelerator-config`, `--system-config`,
  `--memory-mode` from the kind: hetgen/platform/kinds/ethos-u.yaml) with --verbose-performance;
  its per-layer cycles (the "Total" column's NPU cycles, by output tensor) and its SRAM use
  ("Total SRAM used") are read from its report.
- hetgen places the ONNX graph on the platform (cost placement): per group on the NPU its
  estimate (`Group.cost_us`), the network's `Placement.total_us`, and unless --estimate-only,
  `hetgen bench`'s simulated_us of the built program (native build).

Per layer: hetgen's group whose head's quantized output is the TFLite op's output, its us beside
Vela's (cycles / clock), flagged when more than 50 % off. hetgen's layers on the controller
(QuantizeLinear at the input, DequantizeLinear at the output) have no Vela counterpart: they are
listed and left out of the layer sum. SRAM: Vela's total SRAM against hetgen's peak in the NPU's
memory: where the memory mode keeps the arena in SRAM (Sram_Only, Shared_Sram) the activations
the programs keep there (the npu's arena, without its SHRAM and the emulating kernels' workspace;
and the controller's where its memory is that SRAM: `CONTROLLER_IN_SRAM`); for Dedicated_Sram the tile buffers' peak in the npu's local SRAM (the arena cache).

Platforms: corstone-300 (U55, Sram_Only) and ethos-u65 (U65, Dedicated_Sram), and each in Vela's
Shared_Sram mode (`-shared`: the platform file with its npu's memory_mode Shared_Sram; weights DMA'd
at flash's or DRAM's rate, activations at SRAM's), simulated too: the simulated device DMAs from its
weight store at the weights' rate and latency (templates/runtime/hg_sim.c hg_sim_weight_dma_cycles).
"""

from __future__ import annotations

import argparse
import csv
import logging
import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from hetgen.models._builder import Builder  # noqa: E402
from hetgen.models.mlperf_tiny import KerasNet, ds_cnn, resnet8, same_pads  # noqa: E402

# --------------------------------------------------------------------------------------------------
# Networks: float ONNX with Keras-'same' pads, so the TFLite twin computes the same function: DS-CNN
# and ResNet-8 are hetgen/models/mlperf_tiny.py's (MLPerf Tiny's references) without the softmax;
# MobileNetV2 is hetgen/models/cnn.py's layer list with same pads.


def mobilenet_v2(size: int) -> onnx.ModelProto:
    """hetgen/models/cnn.py's MobileNetV2 (five inverted residual blocks, Relu6) with same pads."""
    b = Builder("mobilenet_v2", 17, 0)
    net = KerasNet(b, 3, (size, size))
    h = net.conv(b.input("input", (1, 3, size, size)), 16, (3, 3), 2, act="relu6")
    for expansion, width, stride in ((1, 16, 1), (4, 24, 2), (4, 24, 1), (4, 32, 2), (4, 32, 1)):
        channels = net.channels
        hidden = channels * expansion
        y = h if expansion == 1 else net.conv(h, hidden, (1, 1), act="relu6")
        y = net.conv(y, hidden, (3, 3), stride, group=hidden, act="relu6")
        y = net.conv(y, width, (1, 1), act=None)
        h = b.op("Add", [h, y]) if stride == 1 and channels == width else y
    h = net.conv(h, 64, (1, 1), act="relu6")
    b.output(net.head(h, 10, softmax=False), (1, 10))
    return b.model()


MODELS = {
    "mobilenetv2_224": lambda: mobilenet_v2(224),
    "mobilenetv2_96": lambda: mobilenet_v2(96),
    "ds_cnn": lambda: ds_cnn(softmax=False),
    "resnet8": lambda: resnet8(softmax=False),
}

# --------------------------------------------------------------------------------------------------
# The quantized ONNX graph as a TFLite flatbuffer.


class Unsupported(Exception):
    pass


def tflite_from_qdq(model: onnx.ModelProto) -> tuple[bytes, dict[str, str]]:
    """The int8 TFLite model computing what the QDQ ONNX `model` computes between its input's
    QuantizeLinear and its output's DequantizeLinear; and, per TFLite op output tensor name, the
    ONNX compute node it came from."""
    import flatbuffers
    from ethosu.vela.tflite import (
        AddOptions,
        Buffer,
        Conv2DOptions,
        DepthwiseConv2DOptions,
        FullyConnectedOptions,
        Model,
        Operator,
        OperatorCode,
        Pool2DOptions,
        QuantizationParameters,
        ReshapeOptions,
        SubGraph,
        Tensor,
    )
    from ethosu.vela.tflite.ActivationFunctionType import ActivationFunctionType as Act
    from ethosu.vela.tflite.BuiltinOperator import BuiltinOperator as Op
    from ethosu.vela.tflite.BuiltinOptions import BuiltinOptions as Opt
    from ethosu.vela.tflite.Padding import Padding
    from ethosu.vela.tflite.TensorType import TensorType

    model = onnx.shape_inference.infer_shapes(model)
    g = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in (*g.value_info, *g.input, *g.output)}
    producers = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    # int8 activations: a QuantizeLinear's output; a float name read through a DequantizeLinear of one
    const_dq = {}  # float name -> (int values, scale, zero point, axis)
    act_of = {}  # float name (a DQ's output) -> int8 tensor name
    qparams = {}  # int8 tensor name -> (scale, zero point)
    for n in g.node:
        if n.op_type == "QuantizeLinear":
            qparams[n.output[0]] = (float(inits[n.input[1]]), int(inits[n.input[2]]))
        elif n.op_type == "DequantizeLinear":
            if n.input[0] in inits:
                axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
                const_dq[n.output[0]] = (inits[n.input[0]], inits[n.input[1]], inits[n.input[2]], axis)
            else:
                act_of[n.output[0]] = n.input[0]

    builder = flatbuffers.Builder(1 << 20)
    buffers: list[bytes] = [b""]
    tensors: list[int] = []
    tensor_index: dict[str, int] = {}

    def vector(start, items, kind):
        start(builder, len(items))
        for item in reversed(items):
            getattr(builder, f"Prepend{kind}")(item)
        return builder.EndVector()

    def quant(scales, zeros, dim=0):
        s = vector(QuantizationParameters.StartScaleVector, [float(v) for v in np.atleast_1d(scales)], "Float32")
        z = vector(QuantizationParameters.StartZeroPointVector, [int(v) for v in np.atleast_1d(zeros)], "Int64")
        QuantizationParameters.Start(builder)
        QuantizationParameters.AddScale(builder, s)
        QuantizationParameters.AddZeroPoint(builder, z)
        QuantizationParameters.AddQuantizedDimension(builder, dim)
        return QuantizationParameters.End(builder)

    def tensor(name, shape, ttype, scales, zeros, data=None, dim=0):
        if name in tensor_index:
            return tensor_index[name]
        buffer = 0
        if data is not None:
            buffers.append(np.ascontiguousarray(data).tobytes())
            buffer = len(buffers) - 1
        q = quant(scales, zeros, dim)
        n = builder.CreateString(name)
        sh = vector(Tensor.StartShapeVector, [int(d) for d in shape], "Int32")
        Tensor.Start(builder)
        Tensor.AddShape(builder, sh)
        Tensor.AddType(builder, ttype)
        Tensor.AddBuffer(builder, buffer)
        Tensor.AddName(builder, n)
        Tensor.AddQuantization(builder, q)
        tensors.append(Tensor.End(builder))
        tensor_index[name] = len(tensors) - 1
        return tensor_index[name]

    def nhwc(shape):
        return [shape[0], *shape[2:], shape[1]] if len(shape) == 4 else shape

    def activation(int8_name, float_shape):
        scale, zero = qparams[int8_name]
        return tensor(int8_name, nhwc(float_shape), TensorType.INT8, scale, zero)

    codes: list[int] = []
    ops: list[int] = []
    origin: dict[str, str] = {}

    def operator(code, inputs, outputs, opt_type, opt):
        if code not in codes:
            codes.append(code)
        ins = vector(Operator.StartInputsVector, inputs, "Int32")
        outs = vector(Operator.StartOutputsVector, outputs, "Int32")
        Operator.Start(builder)
        Operator.AddOpcodeIndex(builder, codes.index(code))
        Operator.AddInputs(builder, ins)
        Operator.AddOutputs(builder, outs)
        if opt is not None:
            Operator.AddBuiltinOptionsType(builder, opt_type)
            Operator.AddBuiltinOptions(builder, opt)
        ops.append(Operator.End(builder))

    def output_of(node):
        """The int8 tensor a compute node's result is quantized to, and its fused activation."""
        act, out = Act.NONE, node.output[0]
        nxt = consumers.get(out, [])
        if len(nxt) == 1 and nxt[0].op_type in ("Relu", "Clip"):
            act = Act.RELU if nxt[0].op_type == "Relu" else Act.RELU6
            out = nxt[0].output[0]
            nxt = consumers.get(out, [])
        qs = [c for c in nxt if c.op_type == "QuantizeLinear"]
        if len(qs) != 1:
            raise Unsupported(f"{node.name}: its output is not quantized once")
        return qs[0].output[0], out, act

    def int8_input(name):
        if name not in act_of:
            raise Unsupported(f"{name} is not a dequantized int8 activation")
        return act_of[name]

    passthrough = {}  # float name of a Flatten's output -> int8 tensor it reshapes
    inputs_int8 = []
    for n in g.node:
        if n.op_type == "QuantizeLinear" and n.input[0] in {i.name for i in g.input}:
            inputs_int8.append(activation(n.output[0], shapes[n.input[0]]))
    for n in g.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear", "Relu", "Clip"):
            continue
        if n.op_type == "Conv":
            x = int8_input(n.input[0])
            wq, ws, wz, _ = const_dq[n.input[1]]
            bq, _, _, _ = const_dq[n.input[2]]
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            group = attrs.get("group", 1)
            stride = attrs.get("strides", [1, 1])
            in_shape, q_out, f_out, act = shapes[n.input[0]], *output_of(n)
            out_shape = shapes[f_out]
            kernel = list(wq.shape[2:])
            same = same_pads(in_shape[2:], kernel, stride[0])
            pads = attrs.get("pads", [0, 0, 0, 0])
            padding = Padding.SAME if list(pads) == same else Padding.VALID if not any(pads) else None
            if padding is None:
                raise Unsupported(f"{n.name}: pads {pads} are neither SAME nor VALID")
            depthwise = group > 1
            if depthwise and (group != in_shape[1] or wq.shape[0] != group):
                raise Unsupported(f"{n.name}: grouped, not depthwise")
            w = wq.transpose(1, 2, 3, 0) if depthwise else wq.transpose(0, 2, 3, 1)
            wt = tensor(n.input[1], w.shape, TensorType.INT8, ws, wz, w.astype(np.int8), dim=3 if depthwise else 0)
            bscale = qparams[x][0] * np.atleast_1d(ws)
            bt = tensor(
                n.input[2], bq.shape, TensorType.INT32, bscale, np.zeros_like(bscale, np.int64), bq.astype(np.int32)
            )
            yt = activation(q_out, out_shape)
            if depthwise:
                DepthwiseConv2DOptions.Start(builder)
                DepthwiseConv2DOptions.AddPadding(builder, padding)
                DepthwiseConv2DOptions.AddStrideW(builder, stride[1])
                DepthwiseConv2DOptions.AddStrideH(builder, stride[0])
                DepthwiseConv2DOptions.AddDepthMultiplier(builder, 1)
                DepthwiseConv2DOptions.AddFusedActivationFunction(builder, act)
                DepthwiseConv2DOptions.AddDilationWFactor(builder, 1)
                DepthwiseConv2DOptions.AddDilationHFactor(builder, 1)
                opt = DepthwiseConv2DOptions.End(builder)
                operator(Op.DEPTHWISE_CONV_2D, [tensor_index[x], wt, bt], [yt], Opt.DepthwiseConv2DOptions, opt)
            else:
                Conv2DOptions.Start(builder)
                Conv2DOptions.AddPadding(builder, padding)
                Conv2DOptions.AddStrideW(builder, stride[1])
                Conv2DOptions.AddStrideH(builder, stride[0])
                Conv2DOptions.AddFusedActivationFunction(builder, act)
                Conv2DOptions.AddDilationWFactor(builder, 1)
                Conv2DOptions.AddDilationHFactor(builder, 1)
                opt = Conv2DOptions.End(builder)
                operator(Op.CONV_2D, [tensor_index[x], wt, bt], [yt], Opt.Conv2DOptions, opt)
            origin[q_out] = n.name
        elif n.op_type == "Add":
            a, c = int8_input(n.input[0]), int8_input(n.input[1])
            q_out, f_out, act = output_of(n)
            yt = activation(q_out, shapes[f_out])
            AddOptions.Start(builder)
            AddOptions.AddFusedActivationFunction(builder, act)
            opt = AddOptions.End(builder)
            operator(Op.ADD, [tensor_index[a], tensor_index[c]], [yt], Opt.AddOptions, opt)
            origin[q_out] = n.name
        elif n.op_type in ("AveragePool", "GlobalAveragePool", "MaxPool"):
            x = int8_input(n.input[0])
            q_out, f_out, act = output_of(n)
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            size = shapes[n.input[0]][2:]
            kernel = attrs.get("kernel_shape", size)
            stride = attrs.get("strides", kernel)
            if any(attrs.get("pads", [0])):
                raise Unsupported(f"{n.name}: padded pooling")
            yt = activation(q_out, shapes[f_out])
            Pool2DOptions.Start(builder)
            Pool2DOptions.AddPadding(builder, Padding.VALID)
            Pool2DOptions.AddStrideW(builder, stride[1])
            Pool2DOptions.AddStrideH(builder, stride[0])
            Pool2DOptions.AddFilterWidth(builder, kernel[1])
            Pool2DOptions.AddFilterHeight(builder, kernel[0])
            Pool2DOptions.AddFusedActivationFunction(builder, act)
            opt = Pool2DOptions.End(builder)
            code = Op.MAX_POOL_2D if n.op_type == "MaxPool" else Op.AVERAGE_POOL_2D
            operator(code, [tensor_index[x]], [yt], Opt.Pool2DOptions, opt)
            origin[q_out] = n.name
        elif n.op_type == "Flatten":
            x = int8_input(n.input[0])
            out = n.output[0]
            nxt = consumers.get(out, [])
            if len(nxt) == 1 and nxt[0].op_type == "QuantizeLinear":
                q_out = nxt[0].output[0]
                scale, zero = qparams[q_out]
                if (scale, zero) != qparams[x]:
                    raise Unsupported(f"{n.name}: requantizing Flatten")
            else:
                q_out = x + "_flat"
                qparams[q_out] = qparams[x]
                passthrough[out] = q_out
                act_of[out] = q_out
            yt = activation(q_out, shapes[out])
            shape_t = tensor(q_out + "_shape", [2], TensorType.INT32, 1.0, 0, np.array(shapes[out], np.int32))
            ReshapeOptions.Start(builder)
            opt = ReshapeOptions.End(builder)
            operator(Op.RESHAPE, [tensor_index[x], shape_t], [yt], Opt.ReshapeOptions, opt)
            origin[q_out] = n.name
        elif n.op_type == "Gemm":
            x = int8_input(n.input[0])
            wq, ws, wz, _ = const_dq[n.input[1]]
            bq, _, _, _ = const_dq[n.input[2]]
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            w = wq if attrs.get("transB", 0) else wq.T
            q_out, f_out, act = output_of(n)
            wt = tensor(n.input[1], w.shape, TensorType.INT8, ws, wz, w.astype(np.int8), dim=0)
            bscale = qparams[x][0] * np.atleast_1d(ws)
            bt = tensor(
                n.input[2], bq.shape, TensorType.INT32, bscale, np.zeros_like(bscale, np.int64), bq.astype(np.int32)
            )
            yt = activation(q_out, shapes[f_out])
            FullyConnectedOptions.Start(builder)
            FullyConnectedOptions.AddFusedActivationFunction(builder, act)
            opt = FullyConnectedOptions.End(builder)
            operator(Op.FULLY_CONNECTED, [tensor_index[x], wt, bt], [yt], Opt.FullyConnectedOptions, opt)
            origin[q_out] = n.name
        else:
            raise Unsupported(f"{n.op_type} ({n.name})")
    outputs = []
    for o in g.output:
        dq = producers[o.name]
        if dq.op_type != "DequantizeLinear":
            raise Unsupported(f"output {o.name} is not dequantized")
        outputs.append(tensor_index[dq.input[0]])

    t_vec = vector(SubGraph.StartTensorsVector, tensors, "UOffsetTRelative")
    i_vec = vector(SubGraph.StartInputsVector, inputs_int8, "Int32")
    o_vec = vector(SubGraph.StartOutputsVector, outputs, "Int32")
    op_vec = vector(SubGraph.StartOperatorsVector, ops, "UOffsetTRelative")
    name = builder.CreateString("main")
    SubGraph.Start(builder)
    SubGraph.AddTensors(builder, t_vec)
    SubGraph.AddInputs(builder, i_vec)
    SubGraph.AddOutputs(builder, o_vec)
    SubGraph.AddOperators(builder, op_vec)
    SubGraph.AddName(builder, name)
    subgraph = SubGraph.End(builder)
    code_offsets = []
    for code in codes:
        OperatorCode.Start(builder)
        OperatorCode.AddDeprecatedBuiltinCode(builder, min(code, 127))
        OperatorCode.AddBuiltinCode(builder, code)
        OperatorCode.AddVersion(builder, 1)
        code_offsets.append(OperatorCode.End(builder))
    buffer_offsets = []
    for data in buffers:
        d = None
        if data:
            builder.StartVector(1, len(data), 16)
            builder.head = builder.head - len(data)
            builder.Bytes[builder.head : builder.head + len(data)] = data
            d = builder.EndVector()
        Buffer.Start(builder)
        if d is not None:
            Buffer.AddData(builder, d)
        buffer_offsets.append(Buffer.End(builder))
    c_vec = vector(Model.StartOperatorCodesVector, code_offsets, "UOffsetTRelative")
    s_vec = vector(Model.StartSubgraphsVector, [subgraph], "UOffsetTRelative")
    b_vec = vector(Model.StartBuffersVector, buffer_offsets, "UOffsetTRelative")
    desc = builder.CreateString("hetgen bench_vela: from a QDQ ONNX graph")
    Model.Start(builder)
    Model.AddVersion(builder, 3)
    Model.AddOperatorCodes(builder, c_vec)
    Model.AddSubgraphs(builder, s_vec)
    Model.AddDescription(builder, desc)
    Model.AddBuffers(builder, b_vec)
    builder.Finish(Model.End(builder), file_identifier=b"TFL3")
    return bytes(builder.Output()), origin


# --------------------------------------------------------------------------------------------------
# Vela's report and hetgen's placement.

PLATFORMS = {  # platform file -> Vela's options for its npu0 (the kind's doc names them)
    "corstone-300": ("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Sram_Only"),
    "ethos-u65": ("ethos-u65-256", "Ethos_U65_High_End", "Dedicated_Sram_384KB"),
}
# The same platforms in Vela's Shared_Sram mode (the arena in SRAM, the weights in flash or DRAM:
# hetgen/platform/memory_modes.py): tag -> (platform file, its npu0 line's memory settings, replaced
# by Shared_Sram's; the U65's sram_kib goes so that the mode's SHRAM is its local SRAM).
SHARED = {
    "corstone-300-shared": ("corstone-300", "memory_mode: Sram_Only", "memory_mode: Shared_Sram"),
    "ethos-u65-shared": ("ethos-u65", "sram_kib: 384, memory_mode: Dedicated_Sram", "memory_mode: Shared_Sram"),
}
for _tag, (_file, _, _) in SHARED.items():
    PLATFORMS[_tag] = (*PLATFORMS[_file][:2], "Shared_Sram")
# Where the controller's own memory is the SRAM the NPU's arena is in, so that its arena counts
# in the SRAM set beside Vela's: the Corstone-300's bare-metal Cortex-M55 (its RAM is the system
# SRAM), not ethos-u65.yaml's aarch64 Linux core (its arena is in DRAM).
CONTROLLER_IN_SRAM = {"corstone-300", "corstone-300-shared"}


def run_vela(tflite: Path, accel: str, system: str, mode: str, out: Path) -> dict:
    """Vela's per-layer cycles (by output tensor), its clock, total cycles and SRAM use."""
    vela = shutil.which("vela") or str(Path(sys.executable).with_name("vela"))
    cmd = [vela, str(tflite), "--accelerator-config", accel, "--system-config", system, "--memory-mode", mode]
    cmd += ["--verbose-performance", "--output-dir", str(out)]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    layers, header = {}, None
    for line in text.splitlines():
        if line.startswith("Original Operator"):
            header = line
            continue
        if header and line.strip() and not line.startswith("-"):
            fields = line.split()
            if len(fields) < 10 or fields[2] != "NPU":
                header = None if not fields or fields[0] == "Network" else header
                continue
            layers[fields[-1]] = layers.get(fields[-1], 0) + int(fields[5])  # Op Cycles
    clock = float(re.search(r"Accelerator clock\s+(\d+) MHz", text).group(1))
    sram = float(re.search(r"Total SRAM used\s+([\d.]+) KiB", text).group(1))
    # the report rounds to 0.01 KiB; its summary file has the exact figure (KiB, a multiple of 1/1024)
    for summary in sorted(out.glob("*_summary_*.csv")):
        with summary.open() as handle:
            sram = float(next(csv.DictReader(handle))["sram_memory_used"])
    total = re.search(r"Inference time\s+([\d.]+) ms", text)
    return {
        "layers": layers,
        "clock": clock,
        "sram_kib": sram,
        "ms": float(total.group(1)) if total else None,
        "text": text,
    }


def hetgen_side(model: onnx.ModelProto, platform, simulate: Path | None) -> dict:
    import hetgen
    from hetgen.frontend import import_model
    from hetgen.pipeline import place_and_choose
    from hetgen.platform.model import Role

    graph = import_model(model)
    # an npu that may keep its feature maps in its cache (Dedicated_Sram): the configuration
    # hetgen chooses for this network (hetgen/lower/feature_maps.py), which the build also takes
    platform, placement, _ = place_and_choose(graph, platform, None, {})
    npus = {t.path_str: t for t in platform.targets() if t.role is Role.ACCELERATOR}
    outputs = {n.name: n.outputs[0] for n in graph.nodes}
    layers, other = {}, []
    for group in placement.groups:
        key = outputs[group.nodes[0]]
        if group.target in npus:
            layers[key] = (group.cost_us, group.launch_us, group.label)
        else:
            other.append((group.nodes[0], group.cost_us))
    (npu,) = npus.values()
    result = {"est": placement.total_us, "layers": layers, "other": other, "sim": None}
    # SRAM: the tile buffers' peak in the npu's local memory, and the activations the programs
    # keep in memory (the npu's outside its SRAM and the emulating kernels' workspace, the controller's)
    from hetgen.lower import lower
    from hetgen.lower.program import ProgramRole

    programs = lower(graph, platform, placement).programs
    (device,) = [p for p in programs if p.role is ProgramRole.ACCELERATOR]
    result["local_kib"] = device.sram_size / 1024
    activations = device.memory.arena_size - device.sram_size - device.emulation_scratch
    # a root whose arena is the npu's (hetgen/lower/shared_arena.py: one arena, planned by liveness)
    # keeps its tensors in the npu's activations' bytes: nothing of its own to add
    controller = sum(p.memory.arena_size for p in programs if p.role is ProgramRole.ROOT and not p.arena_in)
    result["shared_arena"] = any(p.arena_in for p in programs)
    result["npu_arena_kib"] = activations / 1024
    result["arena_kib"] = (activations + controller) / 1024
    result["memory_mode"] = npu.attrs["memory_mode"]
    result["in_cache"] = npu.cache_bytes is not None  # its feature maps in the cache: the arena is its use
    if simulate is not None:
        from hetgen.runtime.devices import simulation_report

        project = hetgen.compile(platform, model, out=simulate, native_only=True)
        result["sim"] = simulation_report(project).simulated_us
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenetv2_224,mobilenetv2_96,ds_cnn,resnet8")
    parser.add_argument("--platforms", default=",".join(PLATFORMS))
    parser.add_argument("--estimate-only", action="store_true", help="place only: no build, no simulation")
    parser.add_argument("--keep", metavar="DIR", help="write the files in DIR (default: a temporary folder)")
    parser.add_argument(
        "--no-cascade", action="store_true", help="place with options: {cascade: false} (every layer by itself)"
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    from hetgen.models.quantized import quantized
    from hetgen.platform import load_platform_text

    summary = []
    with tempfile.TemporaryDirectory(prefix="hetgen-bench-vela-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for name in args.models.split(","):
            model = quantized(MODELS[name](), "QDQ", per_channel=True)
            data, origin = tflite_from_qdq(model)
            tflite = root / f"{name}.tflite"
            tflite.write_bytes(data)
            onnx.save(model, root / f"{name}.onnx")
            for tag in args.platforms.split(","):
                accel, system, mode = PLATFORMS[tag]
                vela = run_vela(tflite, accel, system, mode, root / f"vela_{name}_{tag}")
                base, old, new = SHARED.get(tag, (tag, "", ""))
                file = ROOT / "platforms" / f"{base}.yaml"
                text = file.read_text()
                if old:
                    if old not in text:
                        raise SystemExit(f"{file}: its npu0 line no longer says {old!r}")
                    text = text.replace(old, new)
                platform = load_platform_text(
                    text + ("options: {cascade: false}\n" if args.no_cascade else ""), file=str(file)
                )
                # Shared_Sram too: the simulated device DMAs its weight store at the weights' own rate
                out = None if args.estimate_only else root / f"{name}_{tag}"
                het = hetgen_side(model, platform, out)
                print(f"\n{name} on {tag} ({accel}, {system}, {mode})")
                print(
                    f"  {'layer (output tensor)':44} {'onnx node':14} {'vela us':>8} {'hetgen us':>9} {'launch':>7} ratio"
                )
                vela_sum = het_sum = 0.0
                for tensor, cycles in vela["layers"].items():
                    v = cycles / vela["clock"]
                    h = het["layers"].get(tensor)
                    vela_sum += v
                    if h is None:
                        print(f"  {tensor[:44]:44} {origin.get(tensor, '?')[:14]:14} {v:8.1f} {'(cpu)':>9}")
                        continue
                    het_sum += h[0]
                    r = h[0] / v if v else math.inf
                    flag = "  > 50 % off" if abs(r - 1) > 0.5 else ""
                    print(
                        f"  {tensor[:44]:44} {origin.get(tensor, '?')[:14]:14} {v:8.1f} {h[0]:9.1f} {h[1]:7.1f} {r:5.2f}{flag}"
                    )
                for node, us in het["other"]:
                    print(f"  hetgen on the controller: {node[:50]:50} {us:9.1f}")
                vela_us = sum(vela["layers"].values()) / vela["clock"]
                sim = f"{het['sim']:.1f}" if het["sim"] is not None else "-"
                print(
                    f"  total: vela {vela_us:.1f} us; hetgen estimate {het['est']:.1f} us ({het['est'] / vela_us:.2f}x), "
                    f"its npu layers {het_sum:.1f} us; simulated {sim} us"
                )
                # Vela's SRAM: Sram_Only and Shared_Sram, the feature maps (the arena; its SHRAM is
                # not counted); Dedicated_Sram, the cache's use. hetgen's like for like: the
                # activations it keeps (in the system SRAM), or its tile buffers' peak (the cache).
                if het["in_cache"]:  # Dedicated_Sram, feature maps in the cache: the cache holds the arena
                    het_sram = het["npu_arena_kib"]
                elif het["memory_mode"] not in ("Sram_Only", "Shared_Sram"):
                    het_sram = het["local_kib"]
                else:
                    het_sram = het["arena_kib"] if tag in CONTROLLER_IN_SRAM else het["npu_arena_kib"]
                if het["shared_arena"]:
                    parts = "one arena, the npu's and the controller's"
                else:
                    parts = f"the npu's {het['npu_arena_kib']:.1f}, the controller's {het['arena_kib'] - het['npu_arena_kib']:.1f}"
                print(
                    f"  SRAM: vela {vela['sram_kib']:.1f} KiB ({vela['sram_kib'] * 1024:.0f} B); hetgen {het_sram:.1f} KiB "
                    f"({het_sram * 1024:.0f} B; "
                    f"activations {het['arena_kib']:.1f} KiB: {parts}; tile buffers in local SRAM {het['local_kib']:.1f} KiB)"
                )
                summary.append((name, tag, vela_us, het["est"], het["sim"], vela["sram_kib"], het_sram))
    print(
        f"\n{'model':16} {'platform':19} {'vela us':>9} {'est us':>9} {'est/vela':>8} {'sim us':>9} {'sim/vela':>8} {'SRAM KiB vela':>13} {'hetgen':>7}"
    )
    for name, tag, v, e, s, vs, hs in summary:
        sim = f"{s:9.1f} {s / v:8.2f}" if s is not None else f"{'-':>9} {'-':>8}"
        print(f"{name:16} {tag:19} {v:9.1f} {e:9.1f} {e / v:8.2f} {sim} {vs:13.1f} {hs:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

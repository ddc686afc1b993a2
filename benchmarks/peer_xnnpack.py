"""A second peer for MobileNet-class models (issue #22 item 4): XNNPACK, through ExecuTorch's Python
runtime (the `executorch` package and torch: `pip install '.[peers]'`).

The suite's models are ONNX; ExecuTorch exports torch programs. `OnnxModule` runs an ONNX graph's
nodes as torch operators (the ones MobileNet-class networks use), `torch.export` traces it into one
static graph, the XNNPACK partitioner lowers what XNNPACK runs (convolutions with their BatchNorm
folded and activations fused, pools, adds, the classifier), and ExecuTorch's runtime runs the
program. `xnnpack_runner` returns a callable beside hetgen's and onnxruntime's runs, or raises
`PeerUnavailable` with what failed (the benchmark prints it and skips the peer).
"""

from __future__ import annotations

import io
import time

import numpy as np
import onnx
from onnx import numpy_helper

# the suite's models that the peer runs (MobileNet-class: depthwise-separable, small)
PEER_MODELS = (
    "mobilenetv2",
    "mobilenetv2-1.0@224",
    "mobilenetv3s@224",
    "efficientnet-lite0@224",
    "shufflenet@224",
    "ds_cnn",
)


class PeerUnavailable(Exception):
    """Why the peer cannot run here (not installed, or the export failed): the benchmark's skip message."""


def _imports():
    try:
        import torch
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
        from executorch.runtime import Runtime
    except Exception as error:  # ImportError, or a torch/executorch version mismatch failing at import
        raise PeerUnavailable(
            f"XNNPACK (ExecuTorch) peer skipped: {type(error).__name__}: {error} (pip install '.[peers]')"
        ) from None
    return torch, XnnpackPartitioner, to_edge_transform_and_lower, _unsafe_reset_threadpool, Runtime


def _ints(node: onnx.NodeProto, name: str, default=None):
    for attribute in node.attribute:
        if attribute.name == name:
            return list(attribute.ints) if attribute.ints else attribute.i
    return default


def _float(node: onnx.NodeProto, name: str, default: float) -> float:
    for attribute in node.attribute:
        if attribute.name == name:
            return attribute.f
    return default


def onnx_module(model: onnx.ModelProto):
    """A torch.nn.Module that computes `model` (float32, static shapes, the operators below)."""
    torch, *_ = _imports()
    functional = torch.nn.functional

    class OnnxModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.nodes = list(model.graph.node)
            self.constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
            self.buffer_of = {}
            for index, (name, value) in enumerate(self.constants.items()):
                if value.dtype == np.float32:
                    self.register_buffer(f"c{index}", torch.from_numpy(value.copy()))
                    self.buffer_of[name] = f"c{index}"
            initializers = set(self.constants)
            self.inputs = [vi.name for vi in model.graph.input if vi.name not in initializers]
            self.outputs = [vi.name for vi in model.graph.output]

        def value(self, env, name):
            if name in env:
                return env[name]
            return getattr(self, self.buffer_of[name])

        def const(self, name):
            return self.constants[name].tolist()

        def forward(self, *xs):
            env = dict(zip(self.inputs, xs))
            for node in self.nodes:
                results = self.apply(node, env)
                env.update(zip(node.output, results if isinstance(results, (tuple, list)) else (results,)))
            return tuple(env[name] for name in self.outputs)

        def pad(self, x, pads):
            """Symmetric pads as the operator's padding; others as an explicit F.pad (left, right, top, bottom)."""
            half = len(pads) // 2
            if pads[:half] == pads[half:]:
                return x, tuple(pads[:half])
            return functional.pad(x, (pads[1], pads[3], pads[0], pads[2])), (0, 0)

        def apply(self, node, env):  # noqa: C901 (one branch per operator)
            op, inputs = node.op_type, node.input
            x = self.value(env, inputs[0]) if inputs and inputs[0] else None
            if op == "Conv":
                x, padding = self.pad(x, _ints(node, "pads", [0, 0, 0, 0]))
                bias = self.value(env, inputs[2]) if len(inputs) > 2 else None
                return functional.conv2d(
                    x,
                    self.value(env, inputs[1]),
                    bias,
                    tuple(_ints(node, "strides", [1, 1])),
                    padding,
                    tuple(_ints(node, "dilations", [1, 1])),
                    _ints(node, "group", 1),
                )
            if op == "BatchNormalization":
                scale, bias, mean, var = (self.value(env, name) for name in inputs[1:5])
                return functional.batch_norm(x, mean, var, scale, bias, False, 0.0, _float(node, "epsilon", 1e-5))
            if op == "Relu":
                return functional.relu(x)
            if op == "Clip":
                low = self.const(inputs[1]) if len(inputs) > 1 and inputs[1] else _float(node, "min", -np.inf)
                high = self.const(inputs[2]) if len(inputs) > 2 and inputs[2] else _float(node, "max", np.inf)
                return functional.hardtanh(x, low, high) if (low, high) == (0.0, 6.0) else x.clamp(low, high)
            if op == "HardSwish":
                return functional.hardswish(x)
            if op == "HardSigmoid":
                alpha, beta = _float(node, "alpha", 0.2), _float(node, "beta", 0.5)
                if abs(alpha - 1 / 6) < 1e-6 and beta == 0.5:
                    return functional.hardsigmoid(x)
                return (alpha * x + beta).clamp(0.0, 1.0)
            if op == "Sigmoid":
                return torch.sigmoid(x)
            if op in ("Add", "Mul"):
                y = self.value(env, inputs[1])
                return x + y if op == "Add" else x * y
            if op == "GlobalAveragePool":
                return functional.adaptive_avg_pool2d(x, 1)
            if op in ("MaxPool", "AveragePool"):
                x, padding = self.pad(x, _ints(node, "pads", [0, 0, 0, 0]))
                kernel, strides = tuple(_ints(node, "kernel_shape")), tuple(_ints(node, "strides", [1, 1]))
                if op == "MaxPool":
                    return functional.max_pool2d(
                        x, kernel, strides, padding, ceil_mode=bool(_ints(node, "ceil_mode", 0))
                    )
                include = bool(_ints(node, "count_include_pad", 0))
                return functional.avg_pool2d(x, kernel, strides, padding, count_include_pad=include)
            if op == "Flatten":
                return torch.flatten(x, _ints(node, "axis", 1))
            if op == "Gemm":
                if _ints(node, "transA", 0) or _float(node, "alpha", 1.0) != 1.0 or _float(node, "beta", 1.0) != 1.0:
                    raise PeerUnavailable(f"Gemm {node.name!r}: only transA=0, alpha=beta=1 here")
                w = self.value(env, inputs[1])
                w = w if _ints(node, "transB", 0) else w.t()
                return functional.linear(x, w, self.value(env, inputs[2]) if len(inputs) > 2 else None)
            if op in ("Dropout", "Identity"):
                return x
            if op == "Concat":
                return torch.cat([self.value(env, name) for name in inputs], _ints(node, "axis"))
            if op == "Reshape":
                shape = [x.shape[i] if d == 0 else d for i, d in enumerate(self.const(inputs[1]))]
                return x.reshape(shape)
            if op == "Transpose":
                return x.permute(_ints(node, "perm"))
            if op == "Split":
                sizes = self.const(inputs[1]) if len(inputs) > 1 else _ints(node, "split")
                return torch.split(x, sizes, _ints(node, "axis", 0))
            if op == "Slice":
                starts, ends, axes = (self.const(name) for name in inputs[1:4])
                for start, end, axis in zip(starts, ends, axes):
                    x = x.narrow(axis, start, min(end, x.shape[axis]) - start)
                return x
            raise PeerUnavailable(f"operator {op} ({node.name!r}) has no torch form here")

    return OnnxModule().eval()


# ExecuTorch's XNNPACK thread pool is one per process, and each loaded program's XNNPACK runtime
# keeps the pool it was loaded with: resizing it (_unsafe_reset_threadpool) under a loaded program
# frees that program's pool (here: glibc's "__pthread_tpp_change_priority" assertion, or a segfault,
# a few runs later). So the pool is sized once, before the first program loads, and every program
# in the process runs at that count.
POOL = {"threads": None}


def xnnpack_runner(model: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int = 1):
    """(run, outputs of one run, export seconds): `run()` runs the program once on `feeds` with
    XNNPACK's thread pool at `threads` (the process's one count: see POOL)."""
    torch, XnnpackPartitioner, lower, reset_threadpool, Runtime = _imports()
    if POOL["threads"] is None:
        reset_threadpool(threads)
        POOL["threads"] = threads
    elif POOL["threads"] != threads:
        raise PeerUnavailable(
            f"XNNPACK (ExecuTorch) at {threads} threads skipped: its pool is process-wide and already "
            f"runs {POOL['threads']} (a loaded program keeps the pool it was loaded with)"
        )
    module = onnx_module(model)
    arguments = tuple(torch.from_numpy(feeds[name]) for name in module.inputs)
    start = time.perf_counter()
    try:
        exported = torch.export.export(module, arguments)
        program = lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch()
        buffer = io.BytesIO()
        program.write_to_file(buffer)
        data = buffer.getvalue()
        loaded = Runtime.get().load_program(data)  # kept alive with `run`: the method points into it
        method = loaded.load_method("forward")
    except PeerUnavailable:
        raise
    except Exception as error:
        raise PeerUnavailable(f"XNNPACK (ExecuTorch) export failed: {type(error).__name__}: {error}") from None
    seconds = time.perf_counter() - start

    def run(_keep=(data, loaded)):
        return method.execute(list(arguments))

    outputs = [np.asarray(t) for t in run()]
    return run, outputs, seconds

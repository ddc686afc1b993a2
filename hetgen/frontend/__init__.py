"""The frontend stage: an ONNX model → the Graph IR (typed tensors, static shapes, folded constants).

`import_model` is the entry point. Its passes, one module each, in order:

- `load`: read and check the file (protobuf, opset 7..21, shadowing initializers, onnx's full checker
  and strict shape inference (`onnx_checks`), outputs, input types and static input shapes, with
  `shapes=` to fix dynamic ones);
- `functions`: function operators (Attention, GroupNormalization, ...) become their ONNX bodies;
- `convert`: onnx's whole-model shape inference, then the frontend's working graph;
- `contrib_quant`: onnxruntime's com.microsoft QOperator nodes become DequantizeLinear → float
  operator → QuantizeLinear;
- `resolve` (with `rules`, `normalize`, `evaluate`): node by node, judge the node by hetgen's own
  validity rules, rewrite old-opset forms into the newest one (see `normalize` for the node `opset`
  convention lowerings follow), fold constant nodes, and type what onnx left untyped;
- `cleanup`: Identity/Dropout removal, dead nodes, unused training outputs;
- `qdq`: DequantizeLinear → Conv/MatMul/Gemm → QuantizeLinear islands become integer kernels; the
  dequantized constants no pattern used are folded;
- `rewrite`: decomposed LayerNormalization and Gelu become the single operators;
- `bounded`: NonZero/NonMaxSuppression outputs of run-time length get their shape as an output;
- `check`: every unsupported operator, untypable tensor, non-constant shape input and unsupported
  element type, each kind reported in one message; ranks past the runtime's HG_MAX_RANK;
- `work.to_graph`: unique C-identifier node names (`n{index}_{op}[_{onnx name}]`), the frozen Graph.

`export_onnx` turns a Graph back into an ONNX model (tests compare both in onnxruntime).
"""

from __future__ import annotations

from pathlib import Path

import onnx

from hetgen.frontend import bounded, check, cleanup, contrib_quant, convert, functions, load, qdq, resolve, rewrite
from hetgen.frontend.export import export_onnx
from hetgen.frontend.external_data import model_folder
from hetgen.frontend.fold_batchnorm import fold_batchnorm
from hetgen.frontend.fold_shuffle import fold_channel_permutations
from hetgen.frontend.load import MAX_OPSET, MIN_OPSET
from hetgen.frontend.work import to_graph
from hetgen.ir import Graph
from hetgen.names import c_identifier

__all__ = ["MAX_OPSET", "MIN_OPSET", "export_onnx", "import_model", "import_onnx"]


def import_model(
    model: str | Path | onnx.ModelProto,
    *,
    name: str | None = None,
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> Graph:
    """The Graph IR of an ONNX model (a path or a loaded ModelProto).

    `name` names the graph (default: the model's graph name as a C identifier); `shapes` fixes the
    dimensions of inputs, by input name, for models exported with dynamic ones. Raises ModelError
    with one clear message for anything hetgen cannot compile.
    """
    proto, source = load.read_model(model)
    load.check_model(proto, source)
    prepared = functions.expand_functions(load.prepare(proto, source, shapes), source)
    graph_name = c_identifier(name, "model") if name else None
    work = convert.to_work(convert.infer_onnx_shapes(prepared), source, graph_name, model_folder(model))
    contrib_quant.expand_contrib(work)
    resolve.resolve(work)
    cleanup.remove_identities(work)
    cleanup.remove_dead(work)
    qdq.rewrite_qdq(work)
    cleanup.remove_dead(work)
    qdq.fold_dequantize(work, resolve.fold)
    rewrite.rewrite_patterns(work)
    cleanup.unfold_large_constants(work)
    cleanup.trim_optional_outputs(work)
    cleanup.remove_dead(work)
    bounded.add_shape_outputs(work)  # NonZero, NonMaxSuppression on run-time values
    check.check(work)
    return fold_channel_permutations(fold_batchnorm(to_graph(work, work.name))).verify()


import_onnx = import_model

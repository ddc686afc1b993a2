"""If with a constant condition and Loop with a constant trip count become plain nodes.

hetgen compiles static graphs, so control flow compiles where folding decides it: an If whose
condition is a compile-time constant is replaced by the branch it takes, and a Loop whose trip count
(and condition, each iteration) is constant is unrolled. Called by `resolve` on each node before it
is normalised, so the nodes that replace it are normalised, folded and typed like any other: a
Loop unrolls one iteration at a time, and a `_LoopStep` marker after each decides, once the
iteration's condition has been folded, whether another follows. Anything else is left alone, and
`check` reports its non-constant input.

Renaming: the values a branch or body defines get a prefix unique to this copy; names from the
outer scope stay as they are; the branch's or body's outputs are wired to the node's outputs.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from hetgen.errors import ModelError
from hetgen.frontend.functions import rename_outer
from hetgen.frontend.work import ValueType, Work, WorkNode, attr_value

STEP = "_LoopStep"  # hetgen's own marker node, never outside this module and `resolve`


def replacement(node: WorkNode, work: Work) -> list[WorkNode] | None:
    """The nodes that replace `node`, or None when it stays."""
    if node.op == STEP:
        return _next_iteration(node, work)
    if not node.is_default_domain:
        return None
    if node.op in ("If", "Loop", "Scan"):  # onnx typed the outputs from both branches: type them again
        for name in node.outputs:
            work.types.pop(name, None)
    if node.op == "If" and node.inputs[0] in work.constants:
        taken = "then_branch" if bool(np.asarray(work.constants[node.inputs[0]]).reshape(-1)[0]) else "else_branch"
        return _inline(node.attrs[taken], {}, list(node.outputs), work, work.fresh_name(f"{node.outputs[0]}__if"))
    if node.op == "Loop" and _constant_or_omitted(node, 0, work) and _constant_or_omitted(node, 1, work):
        return _start_loop(node, work)
    if node.op == "Scan" and node.opset >= 9:
        return _unrolled_scan(node, work)
    return None


def _constant_or_omitted(node: WorkNode, index: int, work: Work) -> bool:
    return index >= len(node.inputs) or not node.inputs[index] or node.inputs[index] in work.constants


def _inline(
    graph: onnx.GraphProto, bound: dict[str, str], outputs: list[str], work: Work, prefix: str
) -> list[WorkNode]:
    """The graph's nodes, renamed apart; `bound` maps its inputs to outer values; its outputs are
    written to `outputs` ("" for an output nobody reads: it gets a fresh name)."""
    renamed = dict(bound)
    for tensor in graph.initializer:
        renamed[tensor.name] = work.fresh_name(prefix + tensor.name)
        value = numpy_helper.to_array(tensor)
        work.constants[renamed[tensor.name]] = value

        work.types[renamed[tensor.name]] = ValueType.of(value)
    for inner in graph.node:
        for name in inner.output:
            if name and name not in renamed:
                renamed[name] = work.fresh_name(prefix + name)
    nodes = []
    for inner in graph.node:
        domain = "" if inner.domain in ("", "ai.onnx") else inner.domain
        attrs = {a.name: attr_value(a) for a in inner.attribute}
        for key, value in attrs.items():
            if isinstance(value, onnx.GraphProto):  # a nested branch or body reads this copy's values
                copy_of = onnx.GraphProto()
                copy_of.CopyFrom(value)
                rename_outer(copy_of, renamed)
                attrs[key] = copy_of
        copy = WorkNode(
            inner.op_type,
            [renamed.get(n, n) if n else "" for n in inner.input],
            [renamed[n] if n else "" for n in inner.output],
            attrs,
            domain,
            work.opsets.get(domain, work.opset),
            inner.name,
        )
        nodes.append(copy)
    # each graph output: an Identity from the value it names (remove_identities drops them)
    for value_info, target in zip(graph.output, outputs):
        if target:
            source = renamed.get(value_info.name, value_info.name)
            nodes.append(WorkNode("Identity", [source], [target], {}, "", work.opset))
    return nodes


def _start_loop(node: WorkNode, work: Work) -> list[WorkNode]:
    trips = work.constants.get(node.inputs[0]) if node.inputs and node.inputs[0] else None
    if trips is None:
        raise ModelError(f"{work.source}: {node.label}: a Loop without a trip count has no static length")
    state = {
        "trips": int(np.asarray(trips).reshape(-1)[0]),
        "done": 0,
        "carried": list(node.inputs[2:]),
        "cond": node.inputs[1] if len(node.inputs) > 1 else "",
        "scans": [],  # per iteration: the scan output names
        "loop": node,
    }
    return _next_iteration(WorkNode(STEP, [], [], {"state": state}, "", work.opset), work)


def _next_iteration(marker: WorkNode, work: Work) -> list[WorkNode]:
    state = marker.attrs["state"]
    loop: WorkNode = state["loop"]
    body: onnx.GraphProto = loop.attrs["body"]
    cond = state["cond"]
    if cond and cond not in work.constants:
        raise ModelError(
            f"{work.source}: {loop.label}: the condition after iteration {state['done']} is computed at run "
            "time; hetgen unrolls loops whose trip count and condition are compile-time constants"
        )
    running = not cond or bool(np.asarray(work.constants[cond]).reshape(-1)[0])
    if running and state["done"] < state["trips"]:
        i = state["done"]
        prefix = work.fresh_name(f"{loop.outputs[0]}__it{i}_")
        iteration = work.fresh_name(prefix + "i")
        work.constants[iteration] = np.asarray(i, dtype=np.int64)

        work.types[iteration] = ValueType.of(work.constants[iteration])
        names = [i.name for i in body.input]
        bound = {names[0]: iteration}
        if len(names) > 1 and cond:
            bound[names[1]] = cond
        elif len(names) > 1:  # no condition given: a constant true
            true = work.fresh_name(prefix + "true")
            work.constants[true] = np.asarray(True)
            work.types[true] = ValueType.of(work.constants[true])
            bound[names[1]] = true
        bound.update(zip(names[2:], state["carried"]))
        carried_count = len(state["carried"])
        outputs = [work.fresh_name(prefix + o.name) for o in body.output]
        nodes = _inline(body, bound, outputs, work, prefix)
        state = {
            **state,
            "done": i + 1,
            "cond": outputs[0],
            "carried": outputs[1 : 1 + carried_count],
            "scans": [*state["scans"], outputs[1 + carried_count :]],
        }
        return [*nodes, WorkNode(STEP, [], [], {"state": state}, "", work.opset)]
    return _finish(state, work)


def _finish(state: dict, work: Work) -> list[WorkNode]:
    loop: WorkNode = state["loop"]
    carried = state["carried"]
    outputs = list(loop.outputs)
    nodes = [WorkNode("Identity", [v], [o], {}, "", work.opset) for v, o in zip(carried, outputs) if o]
    scan_outputs = outputs[len(carried) :]
    for k, target in enumerate(scan_outputs):
        if not target:
            continue
        if not state["scans"]:
            raise ModelError(
                f"{work.source}: {loop.label}: a scan output of a loop that runs no iteration has no shape"
            )
        parts = []
        for per_iteration in state["scans"]:
            part = work.fresh_name(f"{target}__part")
            if work.opset >= 13:
                axes = work.fresh_name(f"{target}__axes")
                work.constants[axes] = np.asarray([0], dtype=np.int64)

                work.types[axes] = ValueType.of(work.constants[axes])
                nodes.append(WorkNode("Unsqueeze", [per_iteration[k], axes], [part], {}, "", work.opset))
            else:
                nodes.append(WorkNode("Unsqueeze", [per_iteration[k]], [part], {"axes": (0,)}, "", work.opset))
            parts.append(part)
        nodes.append(WorkNode("Concat", parts, [target], {"axis": 0}, "", work.opset))
    return nodes


def _unrolled_scan(node: WorkNode, work: Work) -> list[WorkNode] | None:
    """Scan (opset 9 on) always has a static length, its scan inputs' extent: one body per step,
    each scan input's step taken with a constant-index Gather, the scan outputs stacked."""
    body: onnx.GraphProto = node.attrs["body"]
    scans = int(node.attrs["num_scan_inputs"])
    states = len(node.inputs) - scans
    scan_inputs = node.inputs[states:]
    if any(name not in work.types for name in scan_inputs):
        return None
    in_axes = list(node.attrs.get("scan_input_axes", ()) or [0] * scans)
    in_reverse = list(node.attrs.get("scan_input_directions", ()) or [0] * scans)
    outputs_count = len(body.output) - states
    out_axes = list(node.attrs.get("scan_output_axes", ()) or [0] * outputs_count)
    out_reverse = list(node.attrs.get("scan_output_directions", ()) or [0] * outputs_count)
    ranks = [work.types[name].rank for name in scan_inputs]
    in_axes = [a + r if a < 0 else a for a, r in zip(in_axes, ranks)]
    lengths = {work.types[name].shape[axis] for name, axis in zip(scan_inputs, in_axes)}
    if len(lengths) != 1:
        raise ModelError(f"{work.source}: {node.label}: scan inputs of different lengths {sorted(lengths)}")
    (length,) = lengths
    nodes: list[WorkNode] = []
    carried = list(node.inputs[:states])
    per_step: list[list[str]] = []
    names = [i.name for i in body.input]
    for step in range(length):
        prefix = work.fresh_name(f"{node.outputs[0]}__step{step}_")
        bound = dict(zip(names[:states], carried))
        for k, (name, axis) in enumerate(zip(scan_inputs, in_axes)):
            index = work.add_constant(prefix + "index", np.asarray(length - 1 - step if in_reverse[k] else step))
            sliced = work.fresh_name(f"{prefix}in{k}")
            nodes.append(WorkNode("Gather", [name, index], [sliced], {"axis": axis}, "", work.opset))
            bound[names[states + k]] = sliced
        step_outputs = [work.fresh_name(prefix + o.name) for o in body.output]
        nodes += _inline(body, bound, step_outputs, work, prefix)
        carried = step_outputs[:states]
        per_step.append(step_outputs[states:])
    nodes += [WorkNode("Identity", [v], [o], {}, "", work.opset) for v, o in zip(carried, node.outputs) if o]
    for k, target in enumerate(node.outputs[states:]):
        if not target:
            continue
        order = range(length - 1, -1, -1) if out_reverse[k] else range(length)
        parts = []
        for step in order:
            part = work.fresh_name(f"{target}__part")
            axes = work.add_constant(f"{target}__axes", np.asarray([out_axes[k]], dtype=np.int64))
            nodes.append(WorkNode("Unsqueeze", [per_step[step][k], axes], [part], {}, "", max(work.opset, 13)))
            parts.append(part)
        nodes.append(WorkNode("Concat", parts, [target], {"axis": out_axes[k]}, "", work.opset))
    return nodes

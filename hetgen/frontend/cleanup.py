"""Graph cleanup: Identity removal, dead-node removal, unused optional outputs, large constants.

Identity nodes (and Dropout, which normalisation turned into Identity) are removed by rewiring their
consumers to the Identity's input. Graph outputs keep the model's names: when an Identity produces a
graph output, its input tensor is renamed to the output's name where that is safe (the input is an
intermediate, not itself a graph input or output); a constant input is copied under the output's
name; otherwise (a graph input passed straight to an output, one tensor as two outputs) the Identity
stays as a copy node.
"""

from __future__ import annotations

from hetgen.frontend.work import ValueType, Work, WorkNode, subgraph_inputs
from hetgen.ops.registry import op_def, supported_ops

# Trailing outputs that only training uses (`OpDef.optional_outputs_from`) are dropped when nothing reads them.


def remove_identities(work: Work) -> None:
    for node in list(work.nodes):
        if node.op != "Identity" or not node.is_default_domain:
            continue
        source, target = node.inputs[0], node.outputs[0]
        if target not in work.outputs:
            work.nodes.remove(node)
            _rename_uses(work, target, source)
        elif source in work.constants:
            work.nodes.remove(node)
            work.constants[target] = work.constants[source]
            work.types[target] = work.types[source]
        elif _can_rename(work, source):
            work.nodes.remove(node)
            _rename_uses(work, source, target)
            for producer in work.nodes:
                producer.outputs = [target if n == source else n for n in producer.outputs]
            work.types[target] = work.types.get(source, work.types.get(target))


def _can_rename(work: Work, name: str) -> bool:
    if name in work.inputs or name in work.outputs:
        return False
    return not any(name in subgraph_inputs(n) for n in work.nodes)


def _rename_uses(work: Work, old: str, new: str) -> None:
    for node in work.nodes:
        if old in node.inputs:
            node.inputs = [new if n == old else n for n in node.inputs]


def trim_optional_outputs(work: Work) -> None:
    used = set(work.consumers()) | set(work.outputs)
    for node in work.nodes:
        definition = op_def(node.op) if node.is_default_domain else None
        keep = definition.optional_outputs_from if definition is not None else None
        if keep is None:
            continue
        while len(node.outputs) > keep and node.outputs[-1] not in used:
            node.outputs.pop()


def remove_dead(work: Work) -> None:
    """Drop nodes no output depends on, then constants and types nothing refers to."""
    live = set(work.outputs)
    kept: list[WorkNode] = []
    for node in reversed(work.nodes):
        if any(name in live for name in node.outputs if name):
            kept.append(node)
            live.update(n for n in node.inputs if n)
            live.update(subgraph_inputs(node))
    work.nodes = kept[::-1]
    live.update(work.inputs)
    for node in work.nodes:
        live.update(n for n in node.outputs if n)
    work.constants = {n: v for n, v in work.constants.items() if n in live}
    work.types = {n: t for n, t in work.types.items() if n in live}


def unfold_large_constants(work: Work) -> None:
    """Put back the node that produced a large folded constant the compiled model would carry.

    Only when hetgen can lower that node; otherwise the value stays folded. The node's inputs are
    small by construction (see `resolve.LARGE_CONSTANT_BYTES`) and are restored as constants.
    """
    supported = supported_ops()
    users = work.consumers()
    for name, (recipe, inputs) in sorted(work.recipes.items()):
        if name not in work.constants or name in work.outputs or name not in users or recipe.op not in supported:
            continue
        del work.constants[name]
        for input_name, value in inputs.items():
            if input_name not in work.constants:
                work.constants[input_name] = value
                work.types[input_name] = ValueType.of(value)
        first_use = min(work.nodes.index(user) for user in users[name])
        work.nodes.insert(first_use, recipe)  # already normalised and typed by `resolve`

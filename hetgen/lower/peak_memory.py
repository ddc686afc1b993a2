"""The generated program's peak memory and the bound it is held to, from the lowered program.

    program = arena (activations + kernel workspaces, as planned) + weights (as packed)
              + the caller's input and output buffers
    bound   = the model's weights (its initializers) + the liveness lower bound of its activations:
              the most bytes of tensors (inputs and outputs included, workspaces not) that the
              root's step list has live at one step, computed here from the same steps the
              generated code runs

No planner can go below the bound without recomputing or streaming weights; `options.memory: lean`
(hetgen/lower/prepack.py) keeps the program within 10 % of it. The root program only: a platform
whose devices hold tensors of their own has more memory than this counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.lower.program import Call, Copy, Lowered, Region

ACTIVATION_REGIONS = (Region.ARENA, Region.INPUT, Region.OUTPUT)


@dataclass(frozen=True)
class MemoryFigures:
    arena: int
    weights: int
    io: int  # the caller's input and output buffers
    model_weights: int
    activation_bound: int  # the liveness lower bound of the activations

    @property
    def program(self) -> int:
        return self.arena + self.weights + self.io

    @property
    def bound(self) -> int:
        return self.model_weights + self.activation_bound


def memory_figures(lowered: Lowered, model_weights: int) -> MemoryFigures:
    """The root program's memory beside its bound; `model_weights`: the bytes of the model's initializers."""
    root = lowered.root
    sizes = {name: nbytes for name, _, nbytes in root.memory.buffers if not name.startswith("scratch:")}
    io = {spec.name: spec.type.nbytes for spec in (*root.inputs, *root.outputs)}
    sizes.update(io)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    steps = root.steps
    for step_index, step in enumerate(steps):
        for ref in _refs(step):
            if ref.region in ACTIVATION_REGIONS and ref.tensor in sizes:
                first.setdefault(ref.tensor, step_index)
                last[ref.tensor] = step_index
    end = max(len(steps) - 1, 0)
    for spec in root.inputs:
        first[spec.name] = 0  # the caller's input is there before the first step
        last.setdefault(spec.name, 0)
    for spec in root.outputs:
        first.setdefault(spec.name, end)
        last[spec.name] = end  # ... and its outputs stay after the last
    live = [0] * (end + 1)
    for name, start in first.items():
        for step_index in range(start, last[name] + 1):
            live[step_index] += sizes[name]
    return MemoryFigures(root.memory.arena_size, root.weights.size, sum(io.values()), model_weights, max(live))


def _refs(step):
    if isinstance(step, Call):
        return step.args
    if isinstance(step, Copy):
        return (step.src, step.dst)
    return ()

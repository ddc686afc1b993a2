"""The generated program's peak memory and the bound it is held to, from the lowered program.

    program = arena (activations + kernel workspaces, as planned) + weights (as packed)
              + the caller's input and output buffers
    bound   = the model's weights (its initializers) + the liveness lower bound of its activations:
              the caller's input and output buffers, which the program can neither free nor reuse
              during a run, plus the most bytes of the other tensors (workspaces not counted) that
              the root's step list has live at one step

The liveness is over hetgen's own order of steps (the one the generated code runs), not the best of
all orders: for a chain of layers they are the same; for branches (Inception, residual blocks) an
order that finishes the larger branch first can need less. No planner of this order can go below
the bound without recomputing or streaming weights; `options.memory: lean` (hetgen/partition/prepack.py)
keeps the program within 10 % of it. The root program only: a platform whose devices hold tensors of
their own has more memory than this counts (but a root whose arena is one with its npu's,
hetgen/lower/shared_arena.py, counts that whole arena, the npu's activations in it, against its own bound).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.lower.memory import ALIGNMENT
from hetgen.lower.program import Call, Copy, Lowered, Region
from hetgen.partition.liveness import live_bytes


@dataclass(frozen=True)
class MemoryFigures:
    arena: int
    weights: int
    io: int  # the caller's input and output buffers
    model_weights: int
    activation_bound: int  # the liveness lower bound of the activations, the caller's buffers included
    # the same with each arena tensor rounded up to the planner's alignment (ALIGNMENT bytes): what
    # any plan that starts every buffer on that boundary must hold; it differs where tensors are
    # small (the mlp's 32- and 10-byte activations: 264 bytes against 296)
    aligned_activation_bound: int = 0

    @property
    def program(self) -> int:
        return self.arena + self.weights + self.io

    @property
    def bound(self) -> int:
        return self.model_weights + self.activation_bound

    @property
    def arena_ratio(self) -> float:
        """The program's own memory (arena + weights) over its part of the bound, the caller's
        buffers left out of both: a stricter figure than program / bound, which they dilute."""
        return (self.arena + self.weights) / max(self.bound - self.io, 1)


def memory_figures(lowered: Lowered, model_weights: int) -> MemoryFigures:
    """The root program's memory beside its bound; `model_weights`: the bytes of the model's initializers."""
    root = lowered.root
    io = sum(spec.type.nbytes for spec in (*root.inputs, *root.outputs))
    bound = io + max(live_bytes_per_step(root), default=0)
    aligned = io + max(live_bytes_per_step(root, ALIGNMENT), default=0)
    return MemoryFigures(root.memory.arena_size, root.weights.size, io, model_weights, bound, aligned)


def live_bytes_per_step(program, alignment: int = 1) -> list[int]:
    """Per step of `program` (the root), the bytes of its arena's tensors live across it, each
    rounded up to `alignment`: each from the step that first touches it to the one that last does.
    Kernel workspaces and the caller's buffers are not counted."""
    plan = program.memory
    sizes = {
        name: -(-nbytes // alignment) * alignment
        for name, _, nbytes in plan.buffers
        if not name.startswith("scratch:") and plan.holder(name) == name  # a view's range is its holder's
    }
    touches = [
        [name for ref in _refs(step) if ref.region is Region.ARENA and (name := plan.holder(ref.tensor)) in sizes]
        for step in program.steps
    ]
    return live_bytes(touches, sizes)


def _refs(step):
    if isinstance(step, Call):
        return step.args
    if isinstance(step, Copy):
        return (step.src, step.dst)
    return ()

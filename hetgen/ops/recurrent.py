"""RNN, GRU and LSTM as fused cell kernels: static sequence length, every direction, layout and activation ONNX allows.

Organised as onnxruntime's deep_cpu_gru/lstm (MLAS) organises them, per direction:

1. the input projection `X W^T + Wb (+ Rb)` of CHUNK steps of a batch row at once, one
   `hg_sgemm_ex` GEMM (CHUNK x inputs by inputs x gates * hidden: one row panel of its micro-kernel)
   into the workspace, W packed into the GEMM's B panels at generate time (`Prepacked`) and the
   biases added in its epilogue (onnxruntime projects the whole sequence at once; a chunk keeps the
   workspace near the size of one step's gates, at the GEMM's full speed);
2. per step, the recurrent projection `h R^T` as a vectorised GEMV over R packed into panels of
   PANEL columns (`r_panels`: panel[d][gate][p][k][l] = R[d][gate * hidden + p * PANEL + l][k],
   each gate's rows zero-padded to whole panels), at generate time where R is a constant, else by
   the kernel into its workspace first, so one code path runs both;
3. the gates and the cell in one pass over the hidden units, with branch-free sigmoid and tanh that
   the compiler vectorises (`hg_rnn_sigmoid`: 1 / (1 + exp(-x)) on hg_expf, ~2 ulp; `hg_rnn_tanh`:
   the 13/6 rational interpolant onnxruntime's MLAS and Eigen use, a few ulp on [-9, 9]).

Steps 2 and 3 run over a range of hidden units (`<fn>_cells<d>`): each unit's rows of every gate's
panels, its gates, its cell and its new state need no other unit's, so where a step is large enough
(`step_split`) its units are cut into runs of whole panels, one a thread, and the steps of one
input projection are one hg_parallel_phases call: a phase per step (two for GRU's default reset,
whose h gate reads every unit's `r h`), a barrier between phases instead of a pool call each, and
each run on the same thread every step, so its rows of R stay in that core's cache. Step s reads
the state in one buffer and writes the other (`state[s % 2]`, `state[(s + 1) % 2]`), so a run
never overwrites a unit another run still reads. Step 1 is one GEMM call, which hg_gemm.c splits
by columns itself where it is large enough.

The cells are templates of their own (`recurrent_rnn`, `_gru`, `_lstm`.c.j2, chosen by `Cell`)
extending `templates/kernels/_recurrent.j2`. Python decides every index, stride, each direction's
offsets (`Direction`), the workspace layout and the C expression of each activation.

ONNX gate orders: GRU z, r, h; LSTM i, o, f, c (peepholes P: i, o, f). `activation_alpha/beta` are
consumed in order by the activations that take them, as onnxruntime does. GRU's h gate takes Rb
into the input projection, except with linear_before_reset, where r multiplies (h Rh^T + Rbh).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from hetgen.ir import DType
from hetgen.ops import _gemm_plan, _parallel
from hetgen.ops.base import Kernel, OpDef, OpInstance, Prepacked, Unsupported

# Columns of one recurrent-weight panel: two 16-float vectors (one AVX-512 register each, two
# AVX2 or four NEON registers), enough independent multiply-adds per step of the GEMV's k loop.
PANEL = 32
CHUNK = _gemm_plan.PANEL_M  # steps per input projection: one A panel of the GEMM's micro-kernel
VECTOR = 16  # floats of the GEMV's vector (templates/kernels/_nchwc_vector.j2's V)
ALIGN = 16  # floats: each workspace region starts on a 64-byte boundary
# What a step's GEMVs cost the caller alone: multiply-adds per microsecond of `hg_rnn_gemv` on one
# core with R streaming from the last-level cache (1024 x 256 floats, lstm_classifier's: 48 GFLOP/s
# on the Zen 4 core measured in docs/kernels.md, at its load bandwidth; 56 from L2).
GEMV_MACS_PER_US = 24_000


class Cell(Enum):
    """The operator's cell: its gate count and its template."""

    RNN = ("RNN", 1, "kernels/recurrent_rnn.c.j2")
    GRU = ("GRU", 3, "kernels/recurrent_gru.c.j2")
    LSTM = ("LSTM", 4, "kernels/recurrent_lstm.c.j2")

    def __init__(self, op: str, gates: int, template: str):
        self.op, self.gates, self.template = op, gates, template


GATES = {cell.op: cell.gates for cell in Cell}
DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
# activation: (C expression of `v` given alpha and beta, default alpha, default beta); None: unused
_ACTIVATIONS = {
    "relu": ("(v > 0.0f ? v : 0.0f)", None, None),
    "tanh": ("hg_rnn_tanh(v)", None, None),
    "sigmoid": ("hg_rnn_sigmoid(v)", None, None),
    "affine": ("({a} * v + {b})", 1.0, 0.0),
    "leakyrelu": ("(v >= 0.0f ? v : {a} * v)", 0.01, None),
    "thresholdedrelu": ("(v > {a} ? v : 0.0f)", 1.0, None),
    "scaledtanh": ("({a} * hg_rnn_tanh({b} * v))", 1.0, 1.0),
    "hardsigmoid": ("fmaxf(0.0f, fminf(1.0f, {a} * v + {b}))", 0.2, 0.5),
    "elu": ("(v >= 0.0f ? v : {a} * expm1f(v))", 1.0, None),
    "softsign": ("(v / (1.0f + fabsf(v)))", None, None),
    "softplus": ("log1pf(expf(v))", None, None),
}


def _c_float(value: float) -> str:
    text = repr(float(value))
    return f"({text}f)" if "e" in text or "." in text else f"({text}.0f)"


def _activation_expressions(op: OpInstance, directions: int) -> list[list[str]]:
    """[direction][k]: the C expression of the k-th activation of the cell, in terms of `v`."""
    kind = op.node.op
    per_direction = len(DEFAULT_ACTIVATIONS[kind])
    names = op.attr("activations", None)
    names = tuple(names) if names else DEFAULT_ACTIVATIONS[kind] * directions
    if len(names) != per_direction * directions:
        raise Unsupported(
            f"{kind} with {len(names)} activations for {directions} direction(s); "
            f"accepted: {per_direction} per direction"
        )
    alphas = list(op.attr("activation_alpha", ()) or ())
    betas = list(op.attr("activation_beta", ()) or ())
    expressions = []
    for name in names:
        key = (name.decode() if isinstance(name, bytes) else name).lower()
        if key not in _ACTIVATIONS:
            raise Unsupported(f"{kind} activation {name!r}; accepted: {', '.join(sorted(_ACTIVATIONS))}")
        template, alpha, beta = _ACTIVATIONS[key]
        a = alphas.pop(0) if alpha is not None and alphas else alpha
        b = betas.pop(0) if beta is not None and betas else beta
        expressions.append(template.format(a=_c_float(a or 0.0), b=_c_float(b or 0.0)))
    return [expressions[d * per_direction : (d + 1) * per_direction] for d in range(directions)]


def padded_hidden(hidden: int) -> int:
    """Rows of one gate in the recurrent panels: `hidden` rounded up to whole panels."""
    return _gemm_plan.align(hidden, PANEL)


def r_panels(r: np.ndarray, gates: int) -> np.ndarray:
    """R [directions, gates * hidden, hidden] as the GEMV's panels (module doc), float32, flat."""
    directions, rows, hidden = r.shape
    padded_rows = padded_hidden(hidden)
    padded = np.zeros((directions, gates, padded_rows, hidden), np.float32)
    padded[:, :, :hidden, :] = np.asarray(r, np.float32).reshape(directions, gates, hidden, hidden)
    panels = padded.reshape(directions, gates, padded_rows // PANEL, PANEL, hidden).transpose(0, 1, 2, 4, 3)
    return np.ascontiguousarray(panels).reshape(-1)


def w_panels(w: np.ndarray) -> np.ndarray:
    """W [directions, gates * hidden, inputs] as each direction's GEMM B panels (of W[d]^T), flat."""
    return np.concatenate([_gemm_plan.b_panels(np.asarray(w[d], np.float32).T) for d in range(w.shape[0])])


@dataclass(frozen=True)
class Preactivations:
    """The C text of each gate's pre-activation in the cell, of hidden unit `j` (peepholes included)."""

    i: str = ""  # LSTM input gate
    o: str = ""  # LSTM output gate
    f: str = ""  # LSTM forget gate
    c: str = ""  # LSTM cell candidate
    r: str = ""  # GRU reset gate
    h: str = ""  # GRU hidden gate (with linear_before_reset: r times q = h Rh^T + Rbh)


@dataclass(frozen=True)
class Direction:
    """One direction's slices, in elements: of W (as the model has it and as GEMM panels), R's
    panels, B ([Wb, Rb]), the states and Y."""

    reverse: bool
    w: int  # W[d]
    w_panels: int  # W[d]'s B panels in the packed W
    r: int  # R[d]
    r_panels: int  # R[d]'s panels (packed R or the workspace's)
    gemv: tuple[tuple[int, int], ...]  # (panels, rows) of each GEMV onto the projection in place
    h_panels: int  # GRU: R[d]'s h gate panels
    wb: int  # Wb[d]
    rb: int  # Rb[d]
    rb_h: int  # GRU: Rb[d]'s h gate part
    state: int  # initial_h[d], initial_c[d], Y_h[d], Y_c[d]
    y: int  # Y[t][d]
    activations: tuple[str, ...]
    pre: Preactivations


def _directions(cell: Cell, sizes, reverse: tuple[bool, ...], activations, flags, strides):
    gates, hidden, inputs = cell.gates, sizes[0], sizes[1]
    peepholes, lbr = flags
    state_strides, y_strides = strides
    rows = gates * hidden
    w_panel_floats = _gemm_plan.align(rows, _gemm_plan.PANEL_N) * inputs
    gate_panels = padded_hidden(hidden) * hidden
    r_panel_floats = gates * gate_panels
    in_place = 2 if cell is Cell.GRU else gates  # GRU's h gate waits for its reset gate
    directions = []
    for d, (backward, functions) in enumerate(zip(reverse, activations)):
        pre = Preactivations()
        if cell is Cell.LSTM:
            peep = [f"peep[{d * 3 * hidden + k * hidden}u + j]" if peepholes else "0.0f" for k in range(3)]
            pre = Preactivations(
                i=f"g[j] + {peep[0]} * c[j]",
                o=f"g[{hidden}u + j] + {peep[1]} * c[j]",
                f=f"g[{2 * hidden}u + j] + {peep[2]} * c[j]",
                c=f"g[{3 * hidden}u + j]",
            )
        elif cell is Cell.GRU:
            h_gate = f"g[{2 * hidden}u + j]"
            pre = Preactivations(r=f"g[{hidden}u + j]", h=f"{h_gate} + g[{hidden}u + j] * q[j]" if lbr else h_gate)
        directions.append(
            Direction(
                reverse=backward,
                w=d * rows * inputs,
                w_panels=d * w_panel_floats,
                r=d * rows * hidden,
                r_panels=d * r_panel_floats,
                gemv=tuple((d * r_panel_floats + k * gate_panels, k * hidden) for k in range(in_place)),
                h_panels=d * r_panel_floats + 2 * gate_panels,
                wb=d * 2 * rows,
                rb=d * 2 * rows + rows,
                rb_h=d * 2 * rows + rows + 2 * hidden,
                state=d * state_strides[0],
                y=d * y_strides[1],
                activations=tuple(functions),
                pre=pre,
            )
        )
    return tuple(directions)


def step_split(cell: Cell, hidden: int, passes: int, chunk: int) -> _parallel.Split | None:
    """A step's hidden units as the pool shares them: whole GEMV panels (a run's rows of R start a
    panel), one run of panels per thread, the `chunk` steps of an input projection one
    hg_parallel_phases call of `chunk * passes` phases; None where a gate's rows do not end on a
    whole panel, or where sharing the chunk's GEMVs does not pay for the call and its barriers
    (`_parallel.pays`). Each unit's rows, gates and cell are computed by the same code however the
    panels are grouped, so the results do not depend on the thread count."""
    if hidden % PANEL or hidden < 2 * PANEL:
        return None
    split = _parallel.Split(hidden, PANEL, hidden // PANEL)
    chunk_us = chunk * cell.gates * hidden * hidden / GEMV_MACS_PER_US
    return split if _parallel.pays(chunk_us, split.tasks, 1, barriers=chunk * passes - 1) else None


def _regions(sizes: dict[str, int]) -> tuple[dict[str, int], int]:
    """Each workspace region's offset in floats (64-byte aligned, in the order given), and the total."""
    offsets, at = {}, 0
    for name, floats in sizes.items():
        offsets[name] = at
        at += _gemm_plan.align(floats, ALIGN)
    return offsets, at


def lower(op: OpInstance) -> Kernel:
    kind = op.node.op
    x_type = op.input_types[0]
    for index, tensor in enumerate(op.input_types):
        expected = DType.INT32 if index == 4 else DType.FLOAT32
        if tensor is not None and tensor.dtype is not expected:
            raise Unsupported(f"{kind} input {index} of {tensor.dtype.label}; accepted: {expected.label}")
    layout = int(op.attr("layout", 0))
    if layout == 0:
        steps, batch, inputs = x_type.shape
    else:
        batch, steps, inputs = x_type.shape
    gates = GATES[kind]
    weights = op.input_types[1].shape  # [directions, gates * hidden, inputs]
    directions = weights[0]
    hidden = int(op.attr("hidden_size", weights[1] // gates))
    direction = op.attr("direction", "forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("forward", "reverse", "bidirectional"):
        raise Unsupported(f"{kind} direction {direction!r}; accepted: forward, reverse, bidirectional")
    if (direction == "bidirectional") != (directions == 2):
        raise Unsupported(f"{kind} direction {direction!r} with weights for {directions} direction(s)")
    clip = op.attr("clip", None)
    arg_count = len(op.node.inputs)
    # one args slot per node output, NULL for an omitted one (Y is often omitted)
    outputs = {("Y", "Y_h", "Y_c")[k]: arg_count + k for k, name in enumerate(op.node.outputs) if name}
    coupled = kind == "LSTM" and bool(int(op.attr("input_forget", 0)))
    linear_before_reset = kind == "GRU" and bool(int(op.attr("linear_before_reset", 0)))
    # element strides of X[t][b][i], Y[t][d][b][j], and the states [d][b][j] under each layout
    if layout == 0:
        x_strides = (batch * inputs, inputs)
        y_strides = (directions * batch * hidden, batch * hidden, hidden)
        state_strides = (batch * hidden, hidden)
    else:
        x_strides = (inputs, steps * inputs)
        y_strides = (directions * hidden, hidden, steps * directions * hidden)
        state_strides = (hidden, directions * hidden)
    rows = gates * hidden
    chunk = min(CHUNK, steps)
    padded = padded_hidden(hidden)
    cell = Cell[kind]
    reverse = tuple(direction == "reverse" or d == 1 for d in range(directions))
    has = {i: op.has_input(i) for i in range(8)}
    pack_bytes = _gemm_plan.pack_bytes(chunk, rows, inputs, op.gemm_blocks)
    packed_w_bytes = _gemm_plan.pack_bytes(chunk, rows, inputs, op.gemm_blocks, b_packed=True)
    # the workspace: the input projection (one chunk's), the biases it adds, the states, the
    # GEMV's output; then R's panels where no packed R comes, and last the GEMM's packing buffer
    # (smaller where a packed W comes): each offer frees its own region (`scratch_saved`)
    offsets, fixed_floats = _regions(
        {
            "proj": chunk * rows,
            "bias": rows,
            "h": hidden,
            "h_next": hidden,
            "c": hidden,
            "q": padded,
            "rh": hidden,
        }
    )
    r_floats = directions * gates * padded * hidden
    activations = _activation_expressions(op, directions)
    # GRU's default h gate reads every unit's r h: a second pass, once every unit's r is known
    passes = 2 if cell is Cell.GRU and not linear_before_reset else 1
    split = step_split(cell, hidden, passes, chunk)
    params = {
        "kind": kind,
        "steps": steps,
        "batch": batch,
        "inputs": inputs,
        "hidden": hidden,
        "gate_rows": rows,
        "chunk": chunk,
        "gate": tuple(k * hidden for k in range(gates)),  # each gate's first row in g
        "y_floats": steps * directions * batch * hidden,
        "directions": _directions(
            cell,
            (hidden, inputs),
            reverse,
            activations,
            (has[7], linear_before_reset),
            (state_strides, y_strides),
        ),
        "has": has,
        "outputs": outputs,
        "has_y": "Y" in outputs,
        # (output, the C expression of the state it takes after the last step)
        "final_states": tuple(
            (name, state) for name, state in (("Y_h", "seq.state[len % 2u]"), ("Y_c", "c")) if name in outputs
        ),
        "clip": _c_float(clip) if clip is not None else None,
        "linear_before_reset": linear_before_reset,
        # rows of each direction's biases that the input projection adds Rb to (all but LBR GRU's h)
        "rb_rows": 2 * hidden if linear_before_reset else rows,
        "input_forget": coupled,
        "scratch_arg": arg_count + len(op.node.outputs),
        "x_strides": x_strides,
        "y_strides": y_strides,
        "state_strides": state_strides,
        "offsets": offsets,
        "r_offset": fixed_floats,  # R's panels, where no packed R comes; then the GEMM's packing buffer
        "r_floats": r_floats,
        "pack_bytes": pack_bytes,
        "panel": PANEL,
        "panel2": 2 * PANEL,  # the GEMV's k loop: four k at a time, each a panel row apart
        "panel3": 3 * PANEL,
        "padded": padded,
        "V": VECTOR,
        "vector_bytes": 4 * VECTOR,
        "w_packed": False,
        "r_packed": False,
        "split": split,
        # the activation helpers the cells call: only those are defined (an unused static one warns)
        "calls_sigmoid": any("hg_rnn_sigmoid" in e for d in activations for e in d),
        "calls_tanh": any("hg_rnn_tanh" in e for d in activations for e in d),
        "passes": passes,
    }
    prepacked = []
    if op.constant(1) is not None:
        saved = pack_bytes - packed_w_bytes
        prepacked.append(Prepacked(1, w_panels, {"w_packed": True, "pack_bytes": packed_w_bytes}, scratch_saved=saved))
    if op.constant(2) is not None:
        prepacked.append(Prepacked(2, lambda r: r_panels(r, gates), {"r_packed": True}, scratch_saved=4 * r_floats))
    runs = directions * batch  # each runs every step
    chunks = runs * -(-steps // chunk)  # input projections, each followed by its steps
    projection = _parallel.GemmCall(chunk, rows, inputs, calls=chunks, b_packed=op.constant(1) is not None)
    # each chunk's steps: one hg_parallel_phases call, a barrier between two of its phases
    step = _parallel.Phase(
        2 * runs * steps * rows * hidden, split.tasks if split else 1, chunks, runs * steps * passes - chunks
    )
    return Kernel(
        template=cell.template,
        params=params,
        scratch_bytes=4 * (fixed_floats + r_floats) + pack_bytes,
        flops=2 * directions * steps * batch * gates * hidden * (inputs + hidden),
        bytes_accessed=sum(t.nbytes for t in op.input_types if t) + sum(t.nbytes for t in op.output_types),
        helpers=(_gemm_plan.HELPER,) + ((_parallel.HELPER,) if split else ()),
        prepacked=tuple(prepacked),
        parallel=_parallel.Parallel(gemms=(projection,), phases=(step,)),
    )


DEFS = tuple(OpDef(kind, lower) for kind in sorted(GATES))

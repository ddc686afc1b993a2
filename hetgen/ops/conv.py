"""Conv: 1-D, 2-D and 3-D convolution (NCHW), grouped and depthwise, with optional bias.

Five strategies (`ConvVariant`, each a template of its own), chosen here so the templates only lay
out loops:
- `direct` when each group has one input channel (depthwise): a direct loop, vectorised along the
  output row, bias and activation applied while the row is in cache, split between the worker
  pool's threads by channel planes (or blocks of a plane's rows, when there are few planes:
  `depthwise_split`);
- `pointwise` for 1x1 kernels with unit strides and no padding: the NCHW input already is the
  GEMM's B matrix [channels x pixels];
- `winograd` for 3x3 stride-1 layers with enough channels and constant weights (`_winograd.py`);
- `implicit` otherwise (implicit GEMM): no im2col buffer; the GEMM asks a packing function for
  each block of B it needs, and that function gathers the taps straight into the micro-kernel's
  panels (zeros for padding); `implicit_planes` where the input, copied once into zero-padded
  phase planes, fits the GEMM's own B buffer: the taps are then gathered from the planes, as
  unclipped runs (`_conv_planes.py`);
- `small`, on application cores, for an ungrouped layer of small planes and little work (LeNet's,
  a keyword spotter's first convolution) that Winograd does not take, where packing would cost as
  much as the arithmetic: a direct loop over phase planes with several output channels per load
  (`_conv_small.py`), offered before the GEMM's panels.
The weights are the GEMM's A operand; when they are constant they are packed into the
micro-kernel's panels at generate time (`Prepacked`), so no run packs them. Bias and fused
activations run in the GEMM epilogue, on each finished tile of the output while it is in L1; so
does a residual Add fused into the Conv (`hetgen/spec/patterns.py`), read from a fourth input.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from hetgen.ops import _conv_planes, _conv_small, _gemm_plan, _in_place, _parallel, _winograd
from hetgen.ops._activation import Epilogue
from hetgen.ops._common import input_arg_count, require_float32, total_bytes
from hetgen.ops._spatial import conv_geometry
from hetgen.ops.base import Kernel, OpDef, OpInstance, Prepacked, ResidualAdd, Tiling, Unsupported, WorkRule
from hetgen.ops.registers import FILES

# The direct loop sums all taps of a row in one expression up to this kernel width.
MAX_UNROLLED_TAPS = 8


class ConvVariant(str, Enum):
    """How a convolution is computed, and the template that lays it out. A string too, so the
    parameter compares with its name (`params["variant"] == "winograd"`)."""

    DIRECT = "direct"
    POINTWISE = "pointwise"
    IMPLICIT = "implicit"
    IMPLICIT_PLANES = "implicit_planes"
    WINOGRAD = "winograd"
    DEPTHWISE = "depthwise"
    DEPTHWISE_CV = "depthwise_cv"  # 16 channels a vector, on small planes (`depthwise_channel_vector`)
    SMALL = "small"  # small planes, direct (hetgen/ops/_conv_small.py)

    @property
    def template(self) -> str:
        return f"kernels/conv_{self.value}.c.j2"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class DepthwiseSplit:
    """The direct loop's units of work and their pool tasks. A unit is `block_rows` consecutive output
    rows (depth x height) of one channel plane, `blocks` units to a plane; `tasks` cuts the units
    into the pool's tasks, or is None when the layer is too small to share (one serial loop)."""

    block_rows: int
    blocks: int
    tasks: _parallel.Split | None


def depthwise_split(planes: int, rows: int, row_work: int) -> DepthwiseSplit:
    """How the direct (depthwise) loop over `planes` (batch x channels) planes of `rows` output rows,
    each row `row_work` multiply-adds, is cut into tasks. Whole planes where there are enough of them
    to balance the threads; with fewer planes than the pool's task limit, each plane's rows in blocks
    so that a layer of a few large channels still splits. Fixed here, never by the thread count, and
    every output row is computed by the same code whichever task holds it, so any thread count gives
    the same bits."""
    planes, rows = max(planes, 1), max(rows, 1)
    blocks = min(rows, -(-_parallel.MAX_TASKS // planes)) if planes < _parallel.MAX_TASKS else 1
    block_rows = -(-rows // blocks)
    blocks = -(-rows // block_rows)
    tasks = _parallel.split(planes * blocks, block_rows * row_work)
    if tasks is None:  # too small to share: whole planes, the plain loop
        return DepthwiseSplit(rows, 1, None)
    return DepthwiseSplit(block_rows, blocks, tasks)


def strategy(groups: int, cin_group: int, win) -> ConvVariant:
    if cin_group == 1 and groups > 1:
        return ConvVariant.DIRECT
    unit = win.kernel_size == 1 and set(win.strides) == {1} and not any(win.pads_begin + win.pads_end)
    return ConvVariant.POINTWISE if unit else ConvVariant.IMPLICIT


def interior_columns(win) -> tuple[int, int, tuple[int, ...]]:
    """Output columns [lo, hi) whose every tap lies inside the input row, and each tap's offset.

    The direct loop computes these columns with all taps in one pass and the border columns tap by
    tap; (0, 0) when the kernel is too wide to unroll or no column qualifies.
    """
    stride, size, out = win.strides[2], win.in_shape[2], win.out_shape[2]
    offsets = tuple(kw * win.dilations[2] - win.pads_begin[2] for kw in range(win.kernel[2]))
    if len(offsets) > MAX_UNROLLED_TAPS:
        return 0, 0, offsets
    lo = max(-(off // stride) if off < 0 else 0 for off in offsets)
    hi = min(min(out, -(-(size - off) // stride)) if size > off else 0 for off in offsets)
    return (lo, hi, offsets) if lo < hi else (0, 0, offsets)


# The plane kernel's buffer (phase planes and sums of one group of output rows): within L1.
PLANE_BUFFER_FLOATS = 8192
# ... and the taps it sums in one unrolled loop body.
MAX_PLANE_TAPS = 64


def depthwise_plane(win, block_rows: int) -> dict | None:
    """The depthwise kernel over flattened rows (`templates/kernels/conv_depthwise.c.j2`), or None
    where it does not apply (3-D windows, more than MAX_PLANE_TAPS taps).

    The row loop vectorises along one output row, a few lanes wide on the small planes of
    MobileNet-class models (7 or 14 columns), and handles the border columns tap by tap. This one
    copies a group of input rows, zero-padded, into `stride_h x stride_w` phase planes (phase (a, b)
    holds the padded input's rows a, a + s_h, ... and columns b, b + s_w, ...), each `wq` columns
    wide: output (oh, ow) of the group then reads tap (kh, kw) at a fixed offset from flat index
    oh * wq + ow of one phase plane, for every pixel and every stride. So one loop over the group's
    flat index, all taps in its body, computes every output (and wq - out_w columns per row that
    are dropped), vectorised across rows; a second pass applies bias, residual and activation on
    the way to the output."""
    if win.kernel[0] != 1 or win.out_shape[0] != 1 or win.in_shape[0] != 1:
        return None
    (kh_n, kw_n), (s_h, s_w), (d_h, d_w) = win.kernel[1:], win.strides[1:], win.dilations[1:]
    if kh_n * kw_n > MAX_PLANE_TAPS:
        return None
    in_w, out_w, (pad_h, pad_w) = win.in_shape[2], win.out_shape[2], win.pads_begin[1:]
    halo = d_h * (kh_n - 1) // s_h
    wq = out_w + d_w * (kw_n - 1) // s_w
    used = sorted({(d_h * kh % s_h, d_w * kw % s_w) for kh in range(kh_n) for kw in range(kw_n)})
    per_row = (len(used) + 1) * wq
    group_rows = max(1, min(block_rows, (PLANE_BUFFER_FLOATS - len(used) * halo * wq) // per_row))
    hq = group_rows + halo
    phases = []
    for index, (a, b) in enumerate(used):
        # phase columns c whose input column s_w * c + b - pad_w lies in [0, in_w)
        lo = min(wq, max(0, -(-(pad_w - b) // s_w)))
        hi = min(wq, max(lo, -(-(in_w + pad_w - b) // s_w)))
        phases.append(
            {
                "a": a,
                "b": b,
                "base": index * hq * wq,
                "col_lo": lo,
                "col_hi": hi,
                "src_off": b - pad_w,
                "zero_right": hi < wq,
                "row_off": a - pad_h,
                # a whole plane's phase rows whose input row s_h * r + a - pad_h lies in [0, in_h),
                # where the copy starts in the input, and whether its columns are contiguous there
                "rows_lo": min(hq, max(0, -(-(pad_h - a) // s_h))),
                "rows_hi": min(hq, max(0, -(-(win.in_shape[1] + pad_h - a) // s_h))),
                "src_first": (a - pad_h) * in_w + lo * s_w + b - pad_w,
                "cols": hi - lo,
                "unit_stride": s_w == 1,
            }
        )
    # (the tap's index in the weights, its offset in the planes)
    taps = list(enumerate(_conv_planes.tap_offsets(win, {ab: phase["base"] for ab, phase in zip(used, phases)}, wq)))
    return {
        "wq": wq,
        "halo": halo,
        "group_rows": group_rows,
        # each unit one group of the whole plane (DS-CNN's 25x5, MobileNet's 7x7): every unit's phase
        # planes have the same padding, zeroed once per call, and only the input is copied per plane
        "whole_plane": group_rows >= win.out_shape[1]
        and all(p["rows_lo"] < p["rows_hi"] and p["cols"] > 0 for p in phases),
        "phases": phases,
        # stride 2 across: each input row split once into its column phases (as the implicit GEMM's planes)
        "splits": _conv_planes.column_splits(used, phases) if s_w == 2 else None,
        # two partial sums (even and odd taps), so the loop body is two dependency chains, not one
        "taps": taps,
        "taps_even": taps[0::2],
        "taps_odd": taps[1::2],
        "acc_base": len(used) * hq * wq,
        "buffer_floats": len(used) * hq * wq + group_rows * wq,
        "buffer_bytes": 4 * (len(used) * hq * wq + group_rows * wq),
    }


# The channel-vector kernel's channels per vector (AVX-512's 16 floats).
CV_LANES = 16
# The channel-vector kernel's buffer (a block's padded plane and its sums, 16 floats a pixel): in L1.
CV_BUFFER_FLOATS = 8192
# ... its weights stay in registers (one vector a tap, of AVX-512's 32), beside the two sums.
CV_MAX_TAPS = 25


def depthwise_channel_vector(win, batch: int, channels: int, plane: dict) -> dict | None:
    """The depthwise kernel with 16 channels a vector (`templates/kernels/conv_depthwise_cv.c.j2`)
    where AVX-512 compiles it, the plane kernel's parameters `plane` beside it for other ISAs; None
    where it does not pay or apply: fewer than 16 channels, the plane kernel's rows (`wq` floats,
    output columns and halo) a whole vector wide or more, more than CV_MAX_TAPS taps, or a plane
    whose padded copy and sums exceed CV_BUFFER_FLOATS.

    On narrow planes (DS-CNN's 25x5, MobileNet's 7x7) the plane kernel's vectors along a flattened row
    carry the halo columns and each plane's copy in and out costs as much as its taps; here each
    pixel's 16 channels are one vector, every tap one multiply-add by a vector of 16 weights, and the
    planes are transposed into and out of that layout 16 pixels at a time. Per layer, against the
    plane kernel (benchmarks/bench_depthwise.py): 64 x 25x5 4.9 -> 3.0 us, 960 x 7x7 48 -> 30 us,
    32 x 12x12 2.4 -> 1.9 us, but 384 x 14x14 (rows of 16 floats) 35 -> 38 us, so those keep it.
    Priced as the plane kernel is, by the layer's multiply-adds: the offer is taken where it measured
    faster, and the cost model's figure for the layer stays the kernel table's (tests/test_fused_price.py)."""
    if channels < CV_LANES or plane["wq"] >= CV_LANES or win.kernel_size > CV_MAX_TAPS or not win.in_size:
        return None
    (in_h, in_w), (out_h, out_w) = win.in_shape[1:], win.out_shape[1:]
    (pad_t, pad_l), (s_h, s_w), (d_h, d_w) = win.pads_begin[1:], win.strides[1:], win.dilations[1:]
    (k_h, k_w) = win.kernel[1:]
    hp = max(pad_t + in_h, (out_h - 1) * s_h + (k_h - 1) * d_h + 1)
    wp = max(pad_l + in_w, (out_w - 1) * s_w + (k_w - 1) * d_w + 1)
    padded, sums = hp * wp * CV_LANES, out_h * out_w * CV_LANES
    if padded + sums > CV_BUFFER_FLOATS:
        return None
    blocks = -(-channels // CV_LANES)
    taps = [(kh * k_w + kw, (kh * d_h * wp + kw * d_w) * CV_LANES) for kh in range(k_h) for kw in range(k_w)]
    return {
        **plane,
        "variant": ConvVariant.DEPTHWISE_CV,
        "cv_at": tuple((ih + pad_t) * wp + iw + pad_l for ih in range(in_h) for iw in range(in_w)),
        "cv_hp": hp,
        "cv_wp": wp,
        "cv_row_step": s_h * wp,
        "cv_taps_even": taps[0::2],
        "cv_taps_odd": taps[1::2],
        "cv_blocks": blocks,
        "cv_units": batch * blocks,
        "cv_padded_floats": padded,
        "cv_buffer_floats": padded + sums,
        "cv_buffer_bytes": 4 * (padded + sums),
    }


def _as_float32(w: np.ndarray) -> np.ndarray:
    """The plane kernel reads the weights as the model has them, [channels][kh][kw]."""
    return np.ascontiguousarray(w, dtype=np.float32)


def lower(op: OpInstance) -> Kernel:
    require_float32(op)
    x_type, w_type = op.input_types[0], op.input_types[1]
    y_type = op.output_types[0]
    geometry = conv_geometry(op, x_type, w_type, y_type)
    batch, channels, out_channels, groups, win = geometry
    cin_group, cout_group = geometry.cin_group, geometry.cout_group
    variant = strategy(groups, cin_group, win)
    k_dim = cin_group * win.kernel_size
    pack = _gemm_plan.pack_bytes(cout_group, win.out_size, k_dim, op.gemm_blocks) if variant != "direct" else 0
    has_bias = op.has_input(2)
    # a residual Add fused into this Conv (hetgen/spec/patterns.py): input 3, the output's shape
    residual = op.has_input(3)
    # the planes whatever the weights: the host's constants and an accelerator's tile weights in its SRAM
    planes = _conv_planes.planes(win, cin_group, op.gemm_blocks, not residual) if variant == "implicit" else None
    if planes is not None:
        variant = ConvVariant.IMPLICIT_PLANES
    planes_bytes = planes["bytes"] if planes else 0  # the planes come first in the workspace
    if residual and tuple(op.input_types[3].shape) != tuple(y_type.shape):
        raise Unsupported(f"Conv residual of shape {tuple(op.input_types[3].shape)}; accepted: {tuple(y_type.shape)}")
    if has_bias and tuple(op.input_types[2].shape) != (out_channels,):
        # The kernel reads one bias value per output channel; anything else would read past it.
        raise Unsupported(f"Conv bias of shape {tuple(op.input_types[2].shape)}; the spec requires ({out_channels},)")
    inner_lo, inner_hi, w_offsets = interior_columns(win) if variant == "direct" else (0, 0, ())
    params = {
        **win.view(),
        "variant": variant,
        "batch": batch,
        "groups": groups,
        "in_channels": channels,
        "out_channels": out_channels,
        "cin_group": cin_group,
        "cout_group": cout_group,
        "k_dim": k_dim,
        "pack_bytes": pack,
        "planes": planes,
        # the cache blocks `pack` was sized for, passed to the GEMM (a layer may have its own: prepack.py)
        "gemm_kc": op.gemm_blocks.kc,
        "gemm_nc": op.gemm_blocks.nc,
        "w_packed": False,
        "w_group_floats": 0,
        "inner_lo": inner_lo,
        "inner_hi": inner_hi,
        "w_offsets": w_offsets,
        "has_bias": has_bias,
        "residual": residual,
        "out_index": input_arg_count(op),
        "scratch_index": input_arg_count(op) + 1,
        "k_hw": win.kernel[1] * win.kernel[2],
        "w_group_stride": cout_group * k_dim,
        "fused": bool(has_bias or op.epilogue or residual),
        "epilogue": op.epilogue,
        # the same, in the GEMM micro-kernel's registers where it can (None: the C epilogue only)
        "finish": _gemm_plan.finish(op.epilogue) if has_bias or op.epilogue or residual else None,
    }
    if params["finish"]:
        # the group's bias and the residual's block matching the group's output (the C epilogue's addends)
        params["finish"].update(
            bias=f"bias + g * {cout_group}u" if has_bias else "NULL",
            residual="residual + (yg - y)" if residual else "NULL",
        )
    helpers = (_gemm_plan.HELPER,)
    params["band_tasks"] = band_tasks(planes, batch * groups, cout_group, win.out_size, k_dim)
    params["band_scratch_bytes"] = planes_bytes + pack  # a band's planes and its GEMM's packing, in a thread's scratch
    if params["band_tasks"]:
        helpers += (_parallel.HELPER,)
    if variant == "direct":
        rows = win.out_shape[0] * win.out_shape[1]
        split = depthwise_split(batch * out_channels, rows, win.out_shape[2] * win.kernel_size)
        units = batch * out_channels * split.blocks
        params.update(rows=rows, block_rows=split.block_rows, blocks=split.blocks, units=units, split=split.tasks)
        helpers = (_parallel.HELPER,) if split.tasks else ()
    prepacked = ()
    if variant == "direct" and op.constant(1) is not None:
        plane = depthwise_plane(win, params["block_rows"])
        if plane is not None:
            # application cores only: bare metal keeps the row loop, which needs no workspace
            plane.update(variant=ConvVariant.DEPTHWISE, bias_value="bias[m]" if has_bias else "0.0f")
            template = ConvVariant.DEPTHWISE.template
            offer = Prepacked(1, _as_float32, plane, plane["buffer_bytes"], template=template, hosted_only=True)
            prepacked = (offer,)
            vector = depthwise_channel_vector(win, batch, out_channels, plane) if cin_group == cout_group == 1 else None
            if vector is not None:
                # first: where AVX-512 compiles it; the plane kernel's loop otherwise (the same bits)
                vector["cv_bias_value"] = "bias[c0 + c]" if has_bias else "0.0f"
                # a lone Relu as a vector maximum before the transpose back (MAXPS gives its second
                # operand for NaN and for -0, as the C expression does); others in a pass over the planes
                vector["cv_relu_in_register"] = op.epilogue == (Epilogue("Relu"),) and not residual
                vector["cv_finish"] = bool(op.epilogue or residual) and not vector["cv_relu_in_register"]
                scratch = max(plane["buffer_bytes"], vector["cv_buffer_bytes"])
                template = ConvVariant.DEPTHWISE_CV.template
                cv = Prepacked(1, _as_float32, vector, scratch, template=template, hosted_only=True)
                prepacked = (cv, offer)
    if variant != "direct" and op.constant(1) is not None:
        group_floats = _gemm_plan.a_panel_floats(cout_group, k_dim)
        packed = _gemm_plan.pack_bytes(cout_group, win.out_size, k_dim, op.gemm_blocks, a_packed=True)
        panel_params = {
            "w_packed": True,
            "w_group_floats": group_floats,
            "pack_bytes": packed,
            "band_scratch_bytes": planes_bytes + packed,
        }
        panels = Prepacked(1, lambda w: weight_panels(w, groups), panel_params, planes_bytes + packed)
        prepacked = (panels,)
        if _winograd.eligible(win, groups, channels, out_channels):
            # Alternatives for the same weights, the faster first: Winograd's 16/9 larger weights
            # where the memory budget allows them (hetgen/lower/prepack.py), else the GEMM's panels.
            wino_params, wino_scratch = _winograd.plan(win, batch, channels, out_channels, op.gemm_blocks)
            wino_params["variant"] = ConvVariant.WINOGRAD
            winograd = Prepacked(
                1, _winograd.weight_panels, wino_params, wino_scratch, template=ConvVariant.WINOGRAD.template
            )
            prepacked = (winograd, panels)
        # not where Winograd applies: its 3x3 layers have their own transform of the weights
        plans = (
            {}
            if len(prepacked) > 1
            else {r: _conv_small.plan(win, channels, out_channels, groups, has_bias, r) for r in FILES}
        )
        # first: on an application core the direct kernel takes the weights as they are, blocked
        # for its register file (one offer per file; a CPU sees only its own)
        direct = tuple(
            Prepacked(
                1,
                _as_float32,
                {**small, "variant": ConvVariant.SMALL},
                small["sp_workspace_bytes"],
                template=ConvVariant.SMALL.template,
                hosted_only=True,
                registers=registers,
            )
            for registers, small in plans.items()
            if small is not None
        )
        prepacked = (*direct, *prepacked)
        prepacked = (_in_place.conv_offer(k_dim), *prepacked)  # bare metal: the weights read in flash
    return Kernel(
        template=variant.template,
        params=params,
        scratch_bytes=planes_bytes + pack,
        flops=2 * batch * out_channels * win.out_size * k_dim,
        bytes_accessed=total_bytes(*op.input_types, y_type),
        helpers=helpers,
        prepacked=prepacked,
        # the weights' panels are always taken on a CPU with an OS (hetgen/lower/prepack.py)
        parallel=_parallel.tasks_of(params["split"])
        if variant == "direct"
        else _parallel.tasks_of(params["band_tasks"])
        if params["band_tasks"]
        else _parallel.gemm(
            _parallel.GemmCall(cout_group, win.out_size, k_dim, batch * groups, a_packed=bool(prepacked))
        ),
    )


def band_tasks(planes: dict | None, images: int, m: int, n: int, k: int) -> int:
    """The implicit GEMM's bands of output rows as the pool's tasks (conv_implicit_planes.c.j2's
    `_band`), or 0: the bands then run one after another, each GEMM split by hg_gemm.c. Where there
    are two bands or more, one image and group (one pool call), and the product is one hg_gemm.c would
    split (SPLIT_MACS): the same threshold, so a layer shares the pool where it did before."""
    if planes is None or planes["bands"] < 2 or images != 1 or m * n * k < _gemm_plan.SPLIT_MACS:
        return 0
    return int(planes["bands"])


def weight_panels(w: np.ndarray, groups: int) -> np.ndarray:
    """Each group's weights [cout_group x cin_group * kernel] as the GEMM's A panels, group after group."""
    if w.size == 0:  # no output channels: no panels (the kernel's loops run zero times)
        return np.zeros(0, np.float32)
    per_group = w.astype(np.float32).reshape(groups, w.shape[0] // groups, -1)
    return np.concatenate([_gemm_plan.a_panels(matrix) for matrix in per_group])


DEFS = (
    OpDef(
        "Conv",
        lower,
        fusable_epilogue=True,
        weight_input=1,
        work=WorkRule.CONV,
        tiling=Tiling.WINDOW,
        residual=ResidualAdd("Add", 3),  # x, w, bias or "", then the residual
    ),
)

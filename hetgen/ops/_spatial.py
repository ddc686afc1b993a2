"""Sliding-window geometry shared by Conv, ConvTranspose and the pooling operators.

Spatial attributes are normalised to three dimensions (depth, height, width) by prepending unit
dimensions, so one template serves 1-D, 2-D and 3-D operators and the unused loops fold away.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetgen.ops.base import OpInstance, Unsupported

SPATIAL_RANK = 3


@dataclass(frozen=True)
class Window:
    """A window sliding over `in_shape` producing `out_shape`; every field has SPATIAL_RANK entries."""

    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]

    @property
    def kernel_size(self) -> int:
        return self.kernel[0] * self.kernel[1] * self.kernel[2]

    @property
    def in_size(self) -> int:
        return self.in_shape[0] * self.in_shape[1] * self.in_shape[2]

    @property
    def out_size(self) -> int:
        return self.out_shape[0] * self.out_shape[1] * self.out_shape[2]

    def view(self) -> dict:
        """The window as template variables: in_d, in_h, in_w, k_d, ..., pad_w."""
        names = {
            "in": self.in_shape,
            "out": self.out_shape,
            "k": self.kernel,
            "stride": self.strides,
            "dil": self.dilations,
            "pad": self.pads_begin,
        }
        view = {f"{key}_{axis}": values[i] for key, values in names.items() for i, axis in enumerate("dhw")}
        view.update(in_size=self.in_size, out_size=self.out_size, k_size=self.kernel_size)
        return view


def lift(values, fill: int) -> tuple[int, ...]:
    """Prepend `fill` so that a per-spatial-dimension tuple has SPATIAL_RANK entries."""
    values = tuple(int(v) for v in values)
    return (fill,) * (SPATIAL_RANK - len(values)) + values


@dataclass(frozen=True)
class ConvGeometry:
    """A convolution's shapes, checked: batch, channels, groups and its window."""

    batch: int
    channels: int
    out_channels: int
    groups: int
    window: Window

    def __iter__(self):
        """Unpacks as (batch, channels, out_channels, groups, window)."""
        return iter((self.batch, self.channels, self.out_channels, self.groups, self.window))

    @property
    def cin_group(self) -> int:
        return self.channels // self.groups

    @property
    def cout_group(self) -> int:
        return self.out_channels // self.groups


def conv_geometry(op: OpInstance, x_type, w_type, y_type) -> ConvGeometry:
    """The geometry of a Conv-like node (Conv, QLinearConv, ConvInteger), or Unsupported saying why."""
    if x_type.rank < 3:
        raise Unsupported(f"{op.node.op} on a rank-{x_type.rank} input; accepted: N x C x spatial (rank 3 to 5)")
    batch, channels = x_type.shape[:2]
    out_channels = w_type.shape[0]
    groups = int(op.attr("group", 1))
    if groups < 1 or channels % groups or out_channels % groups or w_type.shape[1] * groups != channels:
        raise Unsupported(
            f"{op.node.op} group={groups} does not divide {channels} input / {out_channels} output channels"
        )
    kernel = tuple(op.attr("kernel_shape") or w_type.shape[2:])
    if kernel != tuple(w_type.shape[2:]):
        raise Unsupported(f"{op.node.op} kernel_shape {kernel} differs from the weights' {w_type.shape[2:]}")
    return ConvGeometry(batch, channels, out_channels, groups, window(op, x_type.shape[2:], y_type.shape[2:], kernel))


def spatial_attr(op: OpInstance, key: str, rank: int, default: int) -> tuple[int, ...]:
    value = op.attr(key)
    if value is None:
        return (default,) * rank
    value = tuple(int(v) for v in value)
    if len(value) != rank:
        raise Unsupported(f"{op.node.op} attribute {key} has {len(value)} entries; expected {rank}")
    return value


def window(
    op: OpInstance,
    in_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    kernel: tuple[int, ...],
    transposed: bool = False,
) -> Window:
    """The window of a Conv or pooling node (or ConvTranspose, seen from its output side)."""
    rank = len(in_shape)
    if not 1 <= rank <= SPATIAL_RANK:
        raise Unsupported(f"{op.node.op} with {rank} spatial dimensions; accepted: 1 to {SPATIAL_RANK}")
    strides = spatial_attr(op, "strides", rank, 1)
    dilations = spatial_attr(op, "dilations", rank, 1)
    if min(strides) < 1 or min(dilations) < 1:
        raise Unsupported(f"{op.node.op} with strides {strides} and dilations {dilations}; accepted: values >= 1")
    begin, end = _pads(op, in_shape, out_shape, kernel, strides, dilations, transposed)
    return Window(
        in_shape=lift(in_shape, 1),
        out_shape=lift(out_shape, 1),
        kernel=lift(kernel, 1),
        strides=lift(strides, 1),
        dilations=lift(dilations, 1),
        pads_begin=lift(begin, 0),
        pads_end=lift(end, 0),
    )


def _pads(op, in_shape, out_shape, kernel, strides, dilations, transposed):
    rank = len(in_shape)
    auto_pad = op.attr("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(f"{op.node.op} auto_pad={auto_pad}; accepted: NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    output_shape_attr = transposed and op.attr("output_shape") is not None
    if auto_pad == "VALID" or (auto_pad == "NOTSET" and not output_shape_attr):
        pads = spatial_attr(op, "pads", 2 * rank, 0) if auto_pad == "NOTSET" else (0,) * (2 * rank)
        if min(pads) < 0:
            raise Unsupported(f"{op.node.op} with negative pads {pads}")
        return pads[:rank], pads[rank:]
    begin, end = [], []
    for i in range(rank):
        extent = (kernel[i] - 1) * dilations[i] + 1
        if transposed:
            output_padding = spatial_attr(op, "output_padding", rank, 0)[i]
            total = strides[i] * (in_shape[i] - 1) + output_padding + extent - out_shape[i]
        else:
            total = (out_shape[i] - 1) * strides[i] + extent - in_shape[i]
        total = max(total, 0)
        small, large = total // 2, total - total // 2
        upper = auto_pad == "SAME_UPPER"
        begin.append(small if upper else large)
        end.append(large if upper else small)
    return tuple(begin), tuple(end)

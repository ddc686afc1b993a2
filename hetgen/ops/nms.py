"""NonMaxSuppression on run-time boxes and scores: the selected (batch, class, box) triples, [count, 3]
with count known only at run time, written compactly into a buffer of its bound (hetgen/bounded.py).

The bound, batches * classes * min(boxes, max_output_boxes_per_class), needs that input to be a
compile-time constant; the IoU and score thresholds may be computed at run time. The selection is
onnx's reference algorithm (as onnxruntime's): per batch and class, candidates above the score
threshold in descending score (ties: lower box index first), each kept unless its IoU with a kept
box exceeds the threshold, in float32 as both compute it.
"""

from __future__ import annotations

from hetgen.ir import DType, TensorType
from hetgen.ops._common import require_dtype
from hetgen.ops.base import Kernel, OpDef, OpInstance, Unsupported


def max_boxes_per_class(op: OpInstance) -> int:
    value = op.constant(2)
    if not op.has_input(2) or value is None or value.size == 0:
        return 0  # the default: select nothing
    return max(int(value.reshape(-1)[0]), 0)


def bound(op: OpInstance) -> int:
    batches, boxes = op.input_types[0].shape[:2]
    classes = op.input_types[1].shape[1]
    return batches * classes * min(boxes, max_boxes_per_class(op))


def infer(op: OpInstance) -> tuple[TensorType, ...]:
    return (TensorType(DType.INT64, (bound(op), 3)),)


def lower(op: OpInstance) -> Kernel:
    boxes, scores = op.input_types[:2]
    if len(op.output_types) != 2:
        raise Unsupported("NonMaxSuppression whose output another operator reads: its length is known only at run time")
    require_dtype(boxes.dtype, (DType.FLOAT32,), "NonMaxSuppression boxes")
    require_dtype(scores.dtype, (DType.FLOAT32,), "NonMaxSuppression scores")
    batches, count = boxes.shape[:2]
    classes = scores.shape[1]
    center = int(op.attr("center_point_box", 0))
    if center not in (0, 1):
        raise Unsupported(f"NonMaxSuppression center_point_box={center}; accepted: 0, 1")
    inputs = len(op.node.inputs)
    per_class = min(count, max_boxes_per_class(op))
    return Kernel(
        template="kernels/nms.c.j2",
        params={
            "batches": batches,
            "boxes": count,
            "batch_stride": count * 4,
            "classes": classes,
            "per_class": per_class,
            "center_point_box": center,
            "iou_arg": 3 if op.has_input(3) else None,
            "score_arg": 4 if op.has_input(4) else None,
            "out_arg": inputs,
            "shape_arg": inputs + 1,
            "scratch_arg": inputs + 2,
        },
        # the candidates ({float score; int64 index}: 16 bytes each), then the kept boxes' indices
        scratch_bytes=24 * max(count, 1),
        flops=batches * classes * count * (per_class * 20 + 8),
        bytes_accessed=boxes.nbytes + scores.nbytes + 24 * batches * classes * per_class,
    )


DEFS = (OpDef("NonMaxSuppression", lower, infer=infer, const_inputs=(2,), bounded=True),)

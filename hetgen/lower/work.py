"""The simulator's work descriptors are kernel facts: they live in the kernel table's stage
(hetgen/spec/work.py); lowering and codegen read them from there."""

from hetgen.spec.work import Engine, Work, dma_work, instance_work, kernel_work, shape_work

__all__ = ["Engine", "Work", "dma_work", "instance_work", "kernel_work", "shape_work"]

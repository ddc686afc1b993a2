"""The codegen stage: lowered programs become C sources, headers and weight blobs.

Entry point: `generate(lowered, platform) -> Sources` (files in memory; nothing is written here).
"""

from hetgen.codegen import project
from hetgen.codegen.baremetal import with_board_support
from hetgen.codegen.project import GeneratedFile, Sources
from hetgen.ops._gemm_plan import DEFAULT_BLOCKS, GemmBlocks


def generate(lowered, weights: str = "blob", gemm_blocks: GemmBlocks = DEFAULT_BLOCKS, progress=None) -> Sources:
    """All files of the project, in memory; a bare-metal root also gets its board program.
    `progress` (hetgen/progress.py) hears how many kernels are rendered."""
    sources = project.generate(lowered, weights=weights, gemm_blocks=gemm_blocks, progress=progress)
    return with_board_support(lowered, sources)


__all__ = ["GeneratedFile", "Sources", "generate"]

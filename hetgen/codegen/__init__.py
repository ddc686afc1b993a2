"""The codegen stage: lowered programs become C sources, headers and weight blobs.

Entry point: `generate(lowered, platform) -> Sources` (files in memory; nothing is written here).
"""

from hetgen.codegen import project
from hetgen.codegen.baremetal import with_board_support
from hetgen.codegen.project import GeneratedFile, Sources


def generate(lowered, weights: str = "blob", threads: int = 1) -> Sources:
    """All files of the project, in memory; a bare-metal root also gets its board program."""
    return with_board_support(lowered, project.generate(lowered, weights=weights, threads=threads))


__all__ = ["GeneratedFile", "Sources", "generate"]

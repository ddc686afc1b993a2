"""The codegen stage: lowered programs become C sources, headers and weight blobs.

Entry point: `generate(lowered, platform) -> Sources` (files in memory; nothing is written here).
"""

from hetgen.codegen.project import GeneratedFile, Sources, generate

__all__ = ["GeneratedFile", "Sources", "generate"]

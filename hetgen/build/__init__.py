"""The build stage: one ninja build graph holding two builds, and compile_commands.json.

- native: every target for this machine, one process, loaded by Python through cffi;
- board: each controller by its own (cross) toolchain: static libraries and board programs.

Entry points: `board_plan(sources, platform, options)` (what the board build makes, and what it
cannot yet), `build_files(sources, platform, options, regenerate, out_dir, board)`,
`require_tools(platform, options)` (refuse when a board toolchain is missing), `run_ninja(out_dir)`.
"""

from hetgen.build.board import BoardPlan, board_plan
from hetgen.build.native import library_path
from hetgen.build.ninja_file import Regenerate, build_files, run_ninja
from hetgen.build.toolchain import BuildOptions, missing_tools, require_tools

__all__ = [
    "BoardPlan",
    "BuildOptions",
    "Regenerate",
    "board_plan",
    "build_files",
    "library_path",
    "missing_tools",
    "require_tools",
    "run_ninja",
]

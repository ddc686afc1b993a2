"""The build stage: a ninja build graph (per-target toolchains) and compile_commands.json.

Entry point: `build_files(sources, platform, options, regenerate) -> tuple[GeneratedFile, ...]`;
`run_ninja(out_dir)` builds.
"""

from hetgen.build.ninja_file import BuildOptions, Regenerate, build_files, library_path, run_ninja

__all__ = ["BuildOptions", "Regenerate", "build_files", "library_path", "run_ninja"]

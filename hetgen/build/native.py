"""The native build: every target compiled for this machine and linked into one process.

Each controller's library holds what it runs and, over the in-process transport, everything below
it; the root's shared library is what Python loads through cffi (verify, bench, tests), and the
root's example program runs the same thing without Python.
"""

from __future__ import annotations

from hetgen.build.graph import GraphWriter, driven
from hetgen.build.toolchain import BuildOptions, native_toolchain
from hetgen.codegen.project import Sources
from hetgen.platform.model import Platform


def object_path(source: str) -> str:
    return f"obj/{source}.o"


def library_path(prefix: str) -> str:
    return f"lib/lib{prefix}.so"


def program_path(prefix: str) -> str:
    return f"bin/{prefix}_main"


def native_graph(graph: GraphWriter, sources: Sources, platform: Platform, options: BuildOptions) -> list[str]:
    """Write the native build's edges; return its outputs (what `ninja native` builds)."""
    graph.ninja.comment("native: everything for this machine, one process (simulation, verify, bench, tests)")
    graph.ninja.newline()
    target_by_path = {t.path_str: t for t in platform.targets()}
    by_path = {t.path: t for t in sources.targets}
    own_objects: dict[str, list[str]] = {}
    runtime_objects: dict[str, list[str]] = {}
    example_objects: dict[str, str] = {}
    scopes = {}
    for target_sources in sources.targets:
        scope = graph.target_scope(
            "native", target_sources, native_toolchain(target_by_path[target_sources.path], options)
        )
        scopes[target_sources.path] = scope
        objects = [graph.compile(scope, src, object_path(src)) for src in target_sources.kernels]
        objects.append(graph.compile(scope, target_sources.program, object_path(target_sources.program)))
        weights = target_sources.weights_asm
        objects.append(graph.compile(scope, weights, object_path(weights), implicit=(target_sources.weights_blob,)))
        own_objects[target_sources.path] = objects
        runtime_objects[target_sources.path] = [
            graph.compile(scope, src, f"obj/{target_sources.path}/{src}.o") for src in sorted(set(sources.runtime))
        ]
        if target_sources.example:
            example_objects[target_sources.path] = graph.compile(
                scope, target_sources.example, object_path(target_sources.example)
            )
        graph.ninja.newline()

    outputs = []
    for target_sources in sources.targets:
        if not target_sources.is_controller:
            continue
        scope = scopes[target_sources.path]
        below = driven(target_sources, by_path)
        objects = [obj for t in below for obj in own_objects[t.path]] + runtime_objects[target_sources.path]
        static_lib = graph.archive(scope, f"lib/lib{target_sources.prefix}.a", objects)
        outputs.append(static_lib)
        if target_sources.example:
            outputs.append(graph.link(scope, "solink", library_path(target_sources.prefix), objects))
            program = [example_objects[target_sources.path], static_lib]
            outputs.append(graph.link(scope, "link", program_path(target_sources.prefix), program))
    graph.ninja.newline()
    return outputs

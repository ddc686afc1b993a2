"""What the native and board graphs share: one writer, compile edges that also record their
compile_commands.json entry, per-target toolchain variables.

Every string from outside is escaped by `hetgen.names` for where it lands: `ninja_path` for build
edges, `ninja_command` for variables holding command-line words, `ninja_comment` for comments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ninja import ninja_syntax

from hetgen.codegen.project import TargetSources
from hetgen.names import ninja_command, ninja_comment, ninja_path
from hetgen.platform.model import Toolchain


def driven(target_sources: TargetSources, by_path: dict[str, TargetSources]) -> list[TargetSources]:
    """A target and, recursively, every device it drives."""
    found = [target_sources]
    for child in target_sources.children:
        found += driven(by_path[child], by_path)
    return found


@dataclass(frozen=True)
class TargetScope:
    """One target's compile settings in one build: the ninja variables its edges use."""

    name: str  # e.g. "board-soc-vdevice0-host": the build, then the path joined by '-' (names hold no '-')
    toolchain: Toolchain
    includes: tuple[str, ...]

    def ref(self, key: str) -> str:
        return f"${self.name}_{key}"


@dataclass
class GraphWriter:
    """build.ninja being written, and the compile_commands.json entries of its compile edges."""

    ninja: ninja_syntax.Writer
    out_dir: Path
    compile_commands: list[dict] = field(default_factory=list)

    def target_scope(self, build: str, target_sources: TargetSources, toolchain: Toolchain) -> TargetScope:
        """Declare a target's toolchain variables for `build` ("native" or "board")."""
        includes = ["-I", "runtime", "-I", target_sources.path]
        for child in target_sources.children:
            includes += ["-I", child]
        scope = TargetScope(f"{build}-{target_sources.path.replace('/', '-')}", toolchain, tuple(includes))
        what = f"the {build} toolchain of {target_sources.path}"
        self.ninja.comment(ninja_comment(f"{build} build of target {target_sources.path}"))
        for key, words in (
            ("cc", [toolchain.cc]),
            ("cflags", toolchain.cflags),
            ("ldflags", toolchain.ldflags),
            ("ar", [toolchain.ar]),
            ("launcher", toolchain.launcher),
        ):
            self.ninja.variable(f"{scope.name}_{key}", ninja_command(words, what))
        return scope

    def compile(self, scope: TargetScope, source: str, obj: str, implicit: tuple[str, ...] = ()) -> str:
        what = f"the compile flags of {scope.name}"
        self.ninja.build(
            ninja_path(obj),
            "cc",
            ninja_path(source),
            implicit=[ninja_path(path) for path in implicit],
            variables=[
                ("cc", scope.ref("cc")),
                ("cflags", scope.ref("cflags")),
                ("launcher", scope.ref("launcher")),
                ("includes", ninja_command(scope.includes, what)),
            ],
        )
        toolchain = scope.toolchain
        arguments = [*toolchain.launcher, toolchain.cc, *toolchain.cflags, *scope.includes, "-c", source, "-o", obj]
        self.compile_commands.append(
            {"directory": str(self.out_dir), "arguments": arguments, "file": source, "output": obj}
        )
        return obj

    def archive(self, scope: TargetScope, library: str, objects: list[str]) -> str:
        self.ninja.build(
            ninja_path(library), "ar", [ninja_path(o) for o in objects], variables=[("ar", scope.ref("ar"))]
        )
        return library

    def link(
        self,
        scope: TargetScope,
        rule: str,
        output: str,
        inputs: list[str],
        ldflags: str = "",
        implicit: tuple[str, ...] = (),
        implicit_outputs: tuple[str, ...] = (),
    ) -> str:
        """`implicit`: inputs the command reads that are not linked (a linker script);
        `implicit_outputs`: what else it writes (a map file)."""
        flags = scope.ref("ldflags") + (f" {ldflags}" if ldflags else "")
        variables = [("cc", scope.ref("cc")), ("ldflags", flags)]
        self.ninja.build(
            ninja_path(output),
            rule,
            [ninja_path(i) for i in inputs],
            implicit=[ninja_path(i) for i in implicit] or None,
            implicit_outputs=[ninja_path(o) for o in implicit_outputs] or None,
            variables=variables,
        )
        return output

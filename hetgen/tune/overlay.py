"""The tuned platform file: the user's platform with what `hetgen tune` measured written in.

    options: {tuning: {mc, kc, nc}}         the GEMM's cache blocks (hetgen/platform/tuning.py)
    <the tuned CPU>: figures: {peak_gflops, bandwidth_gbps}   the cost model's figures for it

Everything else is the user's file as YAML reads it (comments aside; the measurements go in a
comment at the top instead). The result is loaded again before it is written, so a file `hetgen
tune` writes always passes `hetgen check`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hetgen.errors import HetgenError
from hetgen.ops._gemm_plan import GemmBlocks


def tuned_document(
    text: str,
    source: Path,
    out: Path,
    path: tuple[str, ...],
    blocks: GemmBlocks | None,
    figures: dict[str, float],
) -> dict[str, Any]:
    """The platform document of `text` (from `source`, to be written at `out`) with the tuning (none:
    left as it is) and the figures of the target at `path` (its first element is the platform's name)."""
    document = yaml.safe_load(text)
    if blocks is not None:
        options = document.get("options") or {}
        options["tuning"] = {"mc": blocks.mc, "kc": blocks.kc, "nc": blocks.nc}
        document["options"] = options
    node = _node(document, path)
    node["figures"] = {**(node.get("figures") or {}), **figures}
    # kinds' template folders are relative to the file that declares them
    for kind in (document.get("kinds") or {}).values():
        folder = kind.get("templates") if isinstance(kind, dict) else None
        if folder and not Path(folder).is_absolute() and source.parent.resolve() != out.parent.resolve():
            kind["templates"] = str((source.parent / folder).resolve())
    return document


def _node(document: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """The mapping of the target at `path`; a `kind` shorthand string becomes `{kind: ...}` in place."""

    def expanded(parent: dict, key: str) -> dict:
        if isinstance(parent[key], str):
            parent[key] = {"kind": parent[key]}
        return parent[key]

    node = expanded(document, "target")
    for name in path[1:]:
        if name == "host" and "host" in node:
            node = expanded(node, "host")
        elif name in (node.get("devices") or {}):
            node = expanded(node["devices"], name)
        else:
            raise HetgenError(f"hetgen tune: cannot find target {'/'.join(path)} in the platform file")
    return node


def tuned_text(document: dict[str, Any], header: list[str]) -> str:
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header)
    return comment + yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=100)

"""hetgen: a platform YAML and an ONNX model become a buildable, cross-compilable C project.

import hetgen
out = hetgen.compile("platforms/host.yaml", "model.onnx", out="generated/host")
model = hetgen.load(out)
outputs = model.run({"input": array})
"""

from __future__ import annotations

from pathlib import Path

from hetgen.errors import HetgenError, InternalError

__version__ = "0.1.0"
__all__ = ["compile", "load", "HetgenError", "InternalError"]


def compile(  # noqa: A001
    platform,
    model,
    out=None,
    *,
    build: bool = True,
    placement: str | None = None,
    objective: str | None = None,
    pins=None,
    shapes=None,
    weights: str = "blob",
    native_only: bool = False,
    **build_options,
) -> Path:
    """Generate the project for `model` on `platform` (a path, a tag or a Platform) and build it.

    `model` is a path or an onnx.ModelProto; `out` defaults to generated/<platform name>;
    `shapes` fixes dynamic input dimensions, e.g. `shapes={"input": (1, 3, 224, 224)}`;
    `placement` ("cost" or "greedy") defaults to the platform's options.placement, else "cost";
    `objective` ("latency", "energy", or "throughput": frames pipelined across devices) defaults to the
    platform's options.objective, else "latency";
    `pins` add to the platform's options.pins; `weights` is "blob" or "c_array"; `native_only` skips the board build (each controller by its own
    cross toolchain), so no cross toolchain is needed; other keywords are `BuildOptions` fields (opt, sanitize, ...).
    All or nothing: if generation or the build fails, `out` is left as it was.
    """
    from hetgen.build import BuildOptions
    from hetgen.pipeline import CompileOptions, compile_model

    options = CompileOptions(
        out=Path(out) if out is not None else None,
        build=build,
        placement=placement,
        objective=objective,
        pins=dict(pins or {}),
        input_shapes={name: tuple(dims) for name, dims in (shapes or {}).items()},
        weights=weights,
        native_only=native_only,
        build_options=BuildOptions(**build_options),
    )
    return compile_model(platform, model, options).out_dir


def load(out_dir):
    """Load a built project: `.run({name: ndarray}) -> {name: ndarray}`, `.inputs`, `.outputs`."""
    from hetgen.runtime.loader import load as load_model

    return load_model(out_dir)

"""hetgen's command line. It parses arguments, reads the environment, calls the pipeline, prints.

hetgen PLATFORM MODEL [-o DIR]      generate and build (the default command)
hetgen generate PLATFORM MODEL      generate only (what build.ninja's regenerate rule runs)
hetgen explain PLATFORM MODEL       where each part of the model goes, and why
hetgen verify DIR                   run the built model against onnxruntime
hetgen bench DIR                    latency beside onnxruntime at its defaults (and simulated device time)
hetgen targets                      the target kinds and their attributes
hetgen boards                       the board catalogue: real SoCs as tags (hetgen imx93 MODEL)
hetgen check PLATFORM               validate a platform file; print its canonical tree
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from hetgen.errors import HetgenError, InternalError

COMMANDS = ("build", "generate", "explain", "verify", "bench", "targets", "boards", "check", "schema", "tune")

EXIT_OK, EXIT_USER_ERROR, EXIT_USAGE, EXIT_BUG = 0, 1, 2, 3
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 130, 141  # 128 + SIGINT, 128 + SIGPIPE, as a shell reports them
EXIT_CODES = f"""exit codes:
  {EXIT_OK}    success
  {EXIT_USER_ERROR}    a user error (bad platform, model, options or inputs; a failed build) or a verify mismatch
  {EXIT_USAGE}    a usage error (unknown command or option)
  {EXIT_BUG}    a hetgen bug (an internal error; HETGEN_DEBUG=1 shows the traceback)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)
  {EXIT_BROKEN_PIPE}  the reader of stdout went away (e.g. `hetgen explain ... | head -1`); nothing is printed
"""


def _search_path() -> tuple[str, ...]:
    from hetgen.platform.search_path import default_search_path

    return default_search_path(os.environ)


def _pins(values: list[str]) -> dict[str, str]:
    pins = {}
    for value in values or ():
        node, sep, target = value.rpartition("=")  # a target path has no "=", a node name may
        if not sep or not node or not target:
            raise HetgenError(f"--pin {value!r}: expected NODE=TARGET/PATH, e.g. --pin conv1=soc/vdevice0/npu0")
        pins[node] = target
    return pins


def _shapes(values: list[str]) -> dict[str, tuple[int, ...]]:
    """`--shape NAME=1x3x224x224` (repeatable); the name may itself contain `=`."""
    shapes = {}
    for value in values or ():
        name, sep, dims = value.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.replace(",", "x").split("x")) if dims else ()
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(d < 0 for d in shape):
            raise HetgenError(
                f"--shape {value!r}: expected NAME=DIMS with DIMS non-negative integers joined by x, "
                "e.g. --shape input=1x3x224x224"
            )
        shapes[name] = shape
    return shapes


def _compile_options(args, build: bool):
    from hetgen.build import BuildOptions
    from hetgen.pipeline import CompileOptions
    from hetgen.progress import Progress

    sanitize = tuple(s for s in (args.sanitize or "").split(",") if s)
    launcher = args.launcher if args.launcher is not None else os.environ.get("HETGEN_LAUNCHER", "")
    if args.opt_level is not None:
        opt = (f"-O{args.opt_level}",)
    else:
        opt = _words(args.opt, "--opt") if args.opt is not None else BuildOptions().opt
    build_options = BuildOptions(
        opt=opt,
        native_tuning=not args.no_native_tuning,
        sanitize=sanitize,
        werror=args.werror,
        launcher=_words(launcher, "--launcher"),
        extra_cflags=_words(args.cflags or "", "--cflags"),
    )
    return CompileOptions(
        out=Path(args.output) if args.output else None,
        build=build,
        placement=args.placement,
        objective=args.objective,
        pins=_pins(args.pin),
        search_path=_search_path(),
        build_options=build_options,
        input_shapes=_shapes(args.shape),
        weights=args.weights,
        in_place=args.in_place,
        native_only=args.native_only,
        progress=Progress.for_stderr(),
    )


def _words(text: str, option: str) -> tuple[str, ...]:
    """Command-line words, split as a shell would (`--launcher "distcc -j8"`)."""
    import shlex

    try:
        return tuple(shlex.split(text))
    except ValueError as error:
        raise HetgenError(f"{option} {text!r}: {error}; give words as a shell would, e.g. {option}='ccache'") from None


def cmd_build(args, build: bool = True) -> int:
    from hetgen.codegen.manifest import read_manifest
    from hetgen.pipeline import compile_model

    options = _compile_options(args, build)
    try:
        compiled = compile_model(args.platform, args.model, options)
    finally:
        if args.stage_times:  # benchmarks/bench_scale.py: each stage's seconds, also of a failed run
            times = {"wall": options.progress.times, "cpu": options.progress.cpu_times}
            Path(args.stage_times).write_text(json.dumps(times, indent=1) + "\n")
    manifest = read_manifest(compiled.out_dir)
    for target in manifest.targets:
        print(
            f"{target.path}: {target.kernels} kernels, {target.runtime} runtime, arena {target.arena_size} B "
            f"(all intermediates {target.intermediate_bytes} B, liveness bound {target.liveness_lower_bound} B), "
            f"weights {target.weights_bytes} B"
        )
    board = manifest.board
    if board is None:
        print("board build: none (--native-only)")
    else:
        for library in board["libraries"]:
            print(f"board: {library['path']} ({library['cc']}, for {library['triple'] or 'this machine'})")
        for program in board["programs"]:
            print(f"board: {program['path']} (program of {program['target']})")
        for note in board["notes"]:
            print(f"board: {note}")
        if build:
            from hetgen.build.baremetal import image_report

            for line in image_report(compiled.out_dir, manifest):
                print(f"board: {line}")
    verb = "built" if build else "generated"
    print(f"{verb} {compiled.out_dir} ({len(compiled.changed)} files changed)")
    return 0


def cmd_explain(args) -> int:
    from hetgen.partition.explain import explain_dot, explain_json, explain_text
    from hetgen.pipeline import import_graph, place_and_choose, resolve_platform

    platform = resolve_platform(args.platform, _search_path())
    graph = import_graph(args.model, _shapes(args.shape))
    # where an npu keeps its feature maps (its arena cache or DRAM: hetgen/lower/feature_maps.py)
    platform, placement, feature_maps = place_and_choose(
        graph, platform, args.placement, _pins(args.pin), objective=args.objective
    )
    placement, banks = _banked(graph, platform, placement)
    if args.format == "json":
        document = explain_json(placement, graph)
        if banks:
            document["banks"] = banks
        if feature_maps:
            document["feature_maps"] = [dataclasses.asdict(choice) for choice in feature_maps]
        print(json.dumps(document, indent=2))
    elif args.format == "dot":
        print(explain_dot(placement, graph))
    elif args.format == "html":
        from hetgen.frontend.fingerprint import model_sha256
        from hetgen.runtime.explain_html import built_report, explain_html

        report = built_report(Path(args.built), platform, graph, model_sha256(args.model)) if args.built else None
        print(explain_html(placement, graph, platform, report), end="")
    else:
        print(explain_text(placement, graph, colour=sys.stdout.isatty() and not os.environ.get("NO_COLOR")))
        for choice in feature_maps:
            print(choice.text())
        if banks:
            from hetgen.lower.banks import bank_text

            print(bank_text(banks, platform.root.controller().path_str))
    return 0


def _banked(graph, platform, placement):
    """A banked root's placement priced at its banks and its plan per bank (hetgen/lower/banks.py),
    both from the lowered program: what explain shows is what is generated. (placement, []) when
    the root declares no memories."""
    if not platform.root.controller().memories:
        return placement, []
    from hetgen.lower import lower
    from hetgen.lower.banks import bank_report

    lowered = lower(graph, platform, placement)
    return lowered.placement, bank_report(lowered)


def cmd_verify(args) -> int:
    from hetgen.runtime.sanitizers import needs_preload, preload_environment
    from hetgen.runtime.verify import tolerances, verify

    out_dir = Path(args.dir)
    if needs_preload(out_dir) and not args.emulate:
        # A sanitizer runtime must be loaded before the Python process starts: verify in a child that has it.
        import subprocess

        command = [sys.executable, "-m", "hetgen", *_verify_argv(args)]
        environment = preload_environment(out_dir, os.environ)
        package_root = str(Path(__file__).resolve().parent.parent)  # the child imports this hetgen
        environment["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        sys.stdout.flush()
        return subprocess.run(command, env=environment).returncode
    inputs = Path(args.inputs) if args.inputs else None
    errors = verify(
        out_dir,
        seed=args.seed,
        rtol=args.rtol,
        atol=args.atol,
        inputs=inputs,
        emulate=args.emulate,
        transport=args.transport,
        steps=args.steps,
    )
    failed = 0
    for error in errors:
        print(error.describe())
        failed += not error.ok
    where = " (board build under emulation)" if args.emulate else ""
    print(f"{len(errors) - failed} of {len(errors)} outputs{where} match onnxruntime ({tolerances(errors)})")
    return EXIT_USER_ERROR if failed else EXIT_OK


def _steps(text: str) -> int:
    """--steps N: a whole number of quantization steps, 0 or more."""
    try:
        steps = int(text)
    except ValueError:
        steps = -1
    if steps < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of quantization steps (0, 1, 2, ...)")
    return steps


def _objective(text: str) -> str:
    """--objective NAME: one the platform file's `options.objective` accepts (hetgen.platform.loader)."""
    from hetgen.platform.loader import objective_problem

    problem = objective_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _threads(text: str) -> int:
    """--threads N: a thread count from 1 to 64 (HG_THREADS_MAX, templates/runtime/hg_threads.h)."""
    try:
        threads = int(text)
    except ValueError:
        threads = 0
    if not 1 <= threads <= 64:
        raise argparse.ArgumentTypeError(f"{text!r} is not a thread count (1 to 64)")
    return threads


def _verify_argv(args) -> list[str]:
    argv = ["verify", str(args.dir), "--seed", str(args.seed), "--rtol", repr(args.rtol), "--atol", repr(args.atol)]
    argv += ["--steps", str(args.steps)]
    return argv + (["--inputs", str(args.inputs)] if args.inputs else [])


def cmd_bench(args) -> int:
    from hetgen.codegen.manifest import read_manifest
    from hetgen.runtime.bench import bench
    from hetgen.runtime.devices import report_lines, simulation_report
    from hetgen.runtime.reference import REFERENCE_SESSION, SPEED_SESSION

    result = bench(Path(args.dir), runs=args.runs, threads=args.threads)
    simulation = simulation_report(Path(args.dir))
    frames = None
    if simulation.devices and read_manifest(Path(args.dir)).frame_depth:  # built for throughput
        from hetgen.runtime.frames import frames_report

        frames = frames_report(Path(args.dir))
    threads = f"{result.threads} thread" + ("" if result.threads == 1 else "s")
    if args.format == "json":
        document = simulation.to_json()
        if frames is not None:
            document["frames"] = {
                "frames": frames.frames,
                "depth": frames.depth,
                "latency_us": round(frames.latency_us, 3),
                "period_us": round(frames.period_us, 3),
                "fps": round(frames.fps, 3),
                "estimate_period_us": round(frames.estimate_period_us, 3),
                "estimate_latency_us": round(frames.estimate_latency_us, 3),
            }
        document.update(
            {
                "hetgen_ms": round(result.hetgen_ms, 4),
                "ort_ms": None if result.ort_ms is None else round(result.ort_ms, 4),
                "ort_session": f"{SPEED_SESSION}, {threads}",
                "reference_session": REFERENCE_SESSION,
                "optimiser_error": result.optimiser_error,
                "skipped": result.skipped,
                "runs": result.runs,
                "threads": result.threads,
            }
        )
        print(json.dumps(document, indent=2))
        return 0
    print(f"hetgen      {result.hetgen_ms:9.3f} ms (median of {result.runs}, {threads})")
    if result.skipped:
        print(result.skipped)
    else:
        print(f"onnxruntime {result.ort_ms:9.3f} ms (median of {result.runs}, {threads}, {SPEED_SESSION})")
        print(f"ratio       {result.ratio:9.2f} x (hetgen / onnxruntime at its defaults)")
    print(
        f"check       {SPEED_SESSION} against {REFERENCE_SESSION} (the numerical reference, "
        f"hetgen verify's): max diff {result.optimiser_error:.1e} of the largest value"
    )
    for line in report_lines(simulation):
        print(line)
    if frames is not None:
        from hetgen.runtime.frames import frames_lines

        for line in frames_lines(frames):
            print(line)
    return 0


def cmd_targets(args) -> int:
    from hetgen.platform.describe import kinds_table

    print(kinds_table(), end="")
    return 0


def cmd_boards(args) -> int:
    from hetgen.platform.catalogue import boards_table

    print(boards_table(), end="")
    return 0


def cmd_check(args) -> int:
    from hetgen.platform.canonical import canonical_yaml
    from hetgen.platform.loader import load_platform

    platform = load_platform(args.platform, _search_path())
    print(canonical_yaml(platform), end="")
    return 0


def cmd_tune(args) -> int:
    from hetgen.tune import refuse_emulated, tune, tune_on

    if args.emulate:
        refuse_emulated(args.platform, _search_path())
    if args.on:
        if not args.built:
            raise HetgenError(
                "hetgen tune --on HOST:PORT needs --built DIR, the generated project the server is built from"
            )
        on = tune_on(
            args.platform,
            args.on,
            Path(args.built),
            key_file=Path(args.key) if args.key else None,
            out=Path(args.out) if args.out else None,
            repeats=args.repeats,
            search_path=_search_path(),
        )
        runs = ", ".join(f"{s * 1e6:.1f} us" for s in on.timing.seconds)
        print(f"{on.timing.target} on {on.timing.address}: programs {runs}; figures {on.figures}", file=sys.stderr)
        return _write_platform(on.text, args.out)
    result = tune(
        args.platform,
        target_path=args.target,
        out=Path(args.out) if args.out else None,
        quick=args.quick,
        search_path=_search_path(),
        progress=lambda line: print(line, file=sys.stderr, flush=True),  # stdout: the file, when no --out
    )
    blocks = result.blocks
    print(f"{result.target}: mc {blocks.mc}, kc {blocks.kc}, nc {blocks.nc}; figures {result.calibration.figures}")
    return _write_platform(result.text, args.out)


def _write_platform(text: str, out: str | None) -> int:
    """A tuned platform file to `out`, or to stdout when none is given."""
    if out:
        Path(out).write_text(text)
        print(f"wrote {out}")
    else:
        print(text, end="")
    return 0


def cmd_schema(args) -> int:
    if args.explain:
        from hetgen.partition.explain_schema import EXPLAIN_SCHEMA

        print(json.dumps(EXPLAIN_SCHEMA, indent=2, sort_keys=True))
        return 0
    from hetgen.platform.json_schema import json_schema

    print(json.dumps(json_schema(), indent=2, sort_keys=True))
    return 0


def _add_compile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("platform", help="platform YAML file or tag (e.g. soc)")
    parser.add_argument("model", help="ONNX model file")
    parser.add_argument(
        "--placement",
        choices=("cost", "greedy"),
        default=None,
        help="placement search (default: the platform's options.placement, else cost)",
    )
    parser.add_argument(
        "--objective",
        type=_objective,
        default=None,
        help="what the placement minimises: latency (one frame's), energy (per inference) or throughput (the period "
        "of frames pipelined across devices) (default: the platform's options.objective, else latency)",
    )
    parser.add_argument(
        "--pin",
        action="append",
        metavar="NODE=TARGET",
        help="force a node or pattern onto a target path (adds to the platform's options.pins; repeatable)",
    )
    parser.add_argument(
        "--shape",
        action="append",
        metavar="NAME=DIMS",
        help="fix an input's dynamic dimensions, e.g. --shape input=1x3x224x224 (repeatable)",
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="hetgen",
        description="Generate and build C for an ONNX model on a heterogeneous platform.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action="version", version=f"hetgen {_version()}")
    sub = top.add_subparsers(dest="command", required=True)
    for name, help_text in (("build", "generate and build (default)"), ("generate", "generate only")):
        command = sub.add_parser(name, help=help_text)
        _add_compile_arguments(command)
        command.add_argument("-o", "--output", help="output folder (default: generated/<platform name>)")
        command.add_argument("--sanitize", help="build with sanitizers, e.g. address,undefined (native build)")
        command.add_argument(
            "--native-only",
            action="store_true",
            help="build only the native simulation (no board build, no cross toolchain needed)",
        )
        command.add_argument(
            "-O", dest="opt_level", metavar="LEVEL", help="optimisation level of both builds, e.g. -O1 (default -O3)"
        )
        command.add_argument("--opt", metavar="FLAGS", help=argparse.SUPPRESS)  # the exact words; the regenerate rule
        command.add_argument("--no-native-tuning", action="store_true", help="no -march=native in the native build")
        command.add_argument("--werror", action="store_true", help="compile with -Werror (both builds)")
        command.add_argument(
            "--cflags", metavar="FLAGS", help="extra compiler flags for both builds, e.g. --cflags='-g -DNDEBUG'"
        )
        command.add_argument(
            "--launcher",
            metavar="WORDS",
            help="prefix every compile command (both builds), e.g. --launcher=ccache or --launcher=distcc; "
            "overrides the platform's toolchain launchers (default: $HETGEN_LAUNCHER)",
        )
        command.add_argument("--no-build", action="store_true", help="generate only")
        command.add_argument("--in-place", action="store_true", help=argparse.SUPPRESS)  # the regenerate rule
        command.add_argument("--stage-times", metavar="FILE", help=argparse.SUPPRESS)  # benchmarks/bench_scale.py
        command.add_argument(
            "--weights",
            choices=("blob", "c_array"),
            default="blob",
            help="weights as a linked blob (default) or a C array",
        )
    explain = sub.add_parser("explain", help="show where each part of the model goes and why")
    _add_compile_arguments(explain)
    explain.add_argument("--format", choices=("text", "json", "dot", "html"), default="text")
    explain.add_argument(
        "--built",
        metavar="DIR",
        help="html: also draw the timeline the simulator counts for this project, built from the same platform and model",
    )
    verify = sub.add_parser("verify", help="compare a built project with onnxruntime")
    verify.add_argument("dir")
    verify.add_argument("--seed", type=int, default=0)
    verify.add_argument("--rtol", type=float, default=1e-4)
    verify.add_argument("--atol", type=float, default=1e-5)
    verify.add_argument(
        "--steps",
        type=_steps,
        default=1,
        metavar="N",
        help="int8/uint8 outputs, and float outputs a DequantizeLinear makes of them, may differ from onnxruntime "
        "by N quantization steps per element (default 1); --rtol/--atol apply to the other outputs",
    )
    verify.add_argument(
        "--inputs", metavar="FILE.npz", help="your inputs (numpy .npz, one array per input name) instead of random ones"
    )
    verify.add_argument(
        "--emulate",
        action="store_true",
        help="run the board build (the cross-built root program) under its kind's emulator, e.g. qemu-aarch64",
    )
    verify.add_argument(
        "--transport",
        choices=("pipe", "tcp"),
        default="pipe",
        help="with --emulate: how the root reaches its co-processors' device servers (default: a pipe pair)",
    )
    bench = sub.add_parser("bench", help="latency beside onnxruntime at its defaults (the speed yardstick)")
    bench.add_argument("dir")
    bench.add_argument("--runs", type=int, default=20)
    bench.add_argument(
        "--threads",
        type=_threads,
        default=1,
        help="threads for both: hetgen's HG_THREADS and onnxruntime's intra_op_num_threads (default 1)",
    )
    bench.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="json: {estimate_us, simulated_us, groups: [...], devices: [...], hetgen_ms, ort_ms, ort_session, skipped}",
    )
    sub.add_parser("targets", help="list target kinds and their attributes")
    sub.add_parser("boards", help="list the board catalogue: real SoCs as platform tags (hetgen TAG MODEL)")
    check = sub.add_parser("check", help="validate a platform; print its canonical tree")
    check.add_argument("platform")
    schema = sub.add_parser("schema", help="print the JSON Schema of platform files")
    schema.add_argument(
        "--explain", action="store_true", help="print the JSON Schema of `explain --format json` instead"
    )
    tune = sub.add_parser(
        "tune", help="measure this machine's CPU: GEMM cache blocks and cost figures, as a tuned platform file"
    )
    tune.add_argument("platform")
    tune.add_argument("--target", metavar="PATH", help="the CPU to tune (default: the root controller)")
    tune.add_argument("--out", metavar="FILE", help="write the tuned platform here (default: print it)")
    tune.add_argument("--quick", action="store_true", help="a few candidates and small probes (seconds; for tests)")
    tune.add_argument(
        "--on", metavar="HOST:PORT", help="time on the target: the co-processor's device server listening there"
    )
    tune.add_argument("--built", metavar="DIR", help="with --on: the generated project the server is built from")
    tune.add_argument("--key", metavar="FILE", help="with --on: the transport key (default DIR/board/transport.key)")
    tune.add_argument(
        "--repeats", type=int, default=20, choices=range(1, 256), metavar="N", help="with --on: runs per program"
    )
    tune.add_argument(
        "--emulate", action="store_true", help="refused: emulated time is not the board's (use --on on the board)"
    )
    return top


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hetgen")
    except PackageNotFoundError:  # run from a source tree
        from hetgen import __version__

        return __version__


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        argv.insert(0, "build")  # `hetgen PLATFORM MODEL` is `hetgen build PLATFORM MODEL`
    try:
        try:
            args = parser().parse_args(argv)
        except SystemExit as done:  # --help, --version, or a usage error (argparse's exit code 2)
            sys.stdout.flush()
            return done.code if isinstance(done.code, int) else EXIT_USAGE
        code = HANDLERS[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's shutdown
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except HetgenError as error:
        print(f"hetgen: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except InternalError as error:
        print(f"hetgen: {error}", file=sys.stderr)
        return EXIT_BUG
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as error:  # anything else is a bug; say so without a traceback unless asked
        if os.environ.get("HETGEN_DEBUG"):
            raise
        print(
            f"hetgen: internal error (this is a hetgen bug; set HETGEN_DEBUG=1 for a traceback): {error.__class__.__name__}: {error}",
            file=sys.stderr,
        )
        return EXIT_BUG


def _quiet_broken_pipe() -> int:
    """The reader went away (`| head`): stop quietly. Python would still flush the dead stdout at
    exit and complain, so point stdout at /dev/null first."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_BROKEN_PIPE


HANDLERS = {
    "build": lambda a: cmd_build(a, build=not a.no_build),
    "generate": lambda a: cmd_build(a, build=False),
    "explain": cmd_explain,
    "verify": cmd_verify,
    "bench": cmd_bench,
    "targets": cmd_targets,
    "boards": cmd_boards,
    "check": cmd_check,
    "schema": cmd_schema,
    "tune": cmd_tune,
}

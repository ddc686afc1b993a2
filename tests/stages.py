"""Every test module of tests/ belongs to one stage of the pipeline (docs/architecture.md); conftest.py
gives each of its tests that stage's marker, so one stage's fast tier is
`python -m pytest -n 2 -q -m "not cc and partition"` (docs/testing.md).

A module missing here fails: each of its tests errors at setup naming this file, and
tests/test_fast_tier.py checks that every tests/test_*.py is listed (and nothing else is).
"""

from __future__ import annotations

from pathlib import Path

# stage: (what it covers, its modules)
STAGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "platform": (
        "the platform stage: loading, kinds, figures, bounds (hetgen/platform/)",
        (
            "test_platform",
            "test_platform_bounds",
            "test_kind_shapes_build",
            "test_yaml_kind",
            "test_device_model",
            "test_ethos_u",
            "test_boards",
        ),
    ),
    "frontend": (
        "the frontend: ONNX import, checks, folding, control flow, QDQ (hetgen/frontend/)",
        ("test_frontend", "test_onnx_checks", "test_qdq_rewrite", "test_control_flow", "test_external_stream"),
    ),
    "ops": (
        "operators and the kernel table: lowerings and kernels against references (hetgen/ops/, hetgen/spec/)",
        (
            "test_backend",
            "test_conformance",
            "test_conformance_pins",
            "test_conv_small",
            "test_depthwise_plane",
            "test_dynamic_count",
            "test_einsum_topk",
            "test_float16",
            "test_float16_native",
            "test_fused_transformer",
            "test_gemm_kernels",
            "test_int8_mcu",
            "test_int8_models",
            "test_int8_npu",
            "test_int8_ops",
            "test_kernel_spec",
            "test_kernel_spec_sharing",
            "test_op_tables",
            "test_kernel_warnings",
            "test_ops_compute",
            "test_ops_tensor",
            "test_optional_inputs",
            "test_pointwise_finish",
            "test_qconv_isa",
            "test_qpack_kernels",
            "test_qpack_gather",
            "test_recurrent",
            "test_residual_epilogue",
            "test_threaded_kernels",
            "test_vector_isa",
            "test_zero_size",
        ),
    ),
    "partition": (
        "placement: patterns, the cost model, the search, explain (hetgen/partition/)",
        (
            "test_partition",
            "test_placement_bound",
            "test_placement_optimal",
            "test_energy",
            "test_placement_speed",
            "test_platform_placement",
            "test_fused_price",
            "test_mac_utilisation",
            "test_cascade",
            "test_monotone_hardware",
            "test_one_truth",
            "test_one_fusion",
            "test_threads_price",
            "test_truth",
            "test_explain_html",
            "test_explain_layout",
            "test_explain_json",
            "test_one_timeline",
            "test_priced_choices",
            "test_throughput",
        ),
    ),
    "lower": (
        "lowering: schedules across devices, memory planning, tiling, layouts (hetgen/lower/)",
        (
            "test_arena_planner",
            "test_memory",
            "test_concat_view",
            "test_split_view",
            "test_memory_bound",
            "test_mcu_memory",
            "test_banks",
            "test_blocked_layout",
            "test_npu_residual",
            "test_cascade_build",
            "test_cascade_arena",
            "test_shared_arena",
            "test_npu_int8_tiling",
            "test_tiling",
            "test_stay",
            "test_concurrency",
            "test_random_placements",
        ),
    ),
    "codegen": (
        "code generation: templates, names, kernel files (hetgen/codegen/)",
        (
            "test_names",
            "test_kernel_sharing",
            "test_template_sandbox",
            "test_templates_ascii",
            "test_template_metrics",
            "test_constants",
            "test_threads_per_controller",
        ),
    ),
    "build": (
        "the build: build.ninja, toolchains, the board build, bare metal (hetgen/build/)",
        ("test_board", "test_baremetal", "test_toolchains", "test_mcu_float", "test_coproc"),
    ),
    "runtime": (
        "a built project run: executors, transport, threads, the simulator, tuning (hetgen/runtime/, hetgen/tune/)",
        (
            "test_manifest_reader",
            "test_reentrant",
            "test_runtime_checks",
            "test_simulator",
            "test_honest_simulation",
            "test_threads",
            "test_transport",
            "test_transport_auth",
            "test_transport_faults",
            "test_tune",
            "test_tune_remote",
            "test_verify_steps",
            "test_yardstick",
            "test_throughput_build",
        ),
    ),
    "pipeline": (
        "end to end: the pipeline, the command line, models, fuzzing, hostile files, packaging",
        (
            "test_pipeline",
            "test_cli",
            "test_models",
            "test_models_build",
            "test_suite_models",
            "test_mlperf_tiny",
            "test_fuzz",
            "test_fuzz_regressions",
            "test_hostile_files",
            "test_output_contention",
            "test_packaging",
            "test_progress",
        ),
    ),
    "suite": (
        "the test suite's own machinery and the code's shape: tiers, stages, the import graph",
        ("test_fast_tier", "test_stage_imports"),
    ),
}

TESTS = Path(__file__).resolve().parent
BY_MODULE = {module: stage for stage, (_, modules) in STAGES.items() for module in modules}


def stage_of(path: Path) -> str | None:
    """The stage of test module `path` (None: not listed); modules outside tests/ have none."""
    return BY_MODULE.get(Path(path).stem)


def unmapped(path: Path) -> bool:
    """A module of tests/ that this table does not list."""
    path = Path(path)
    return path.parent.resolve() == TESTS and path.name.startswith("test_") and path.stem not in BY_MODULE

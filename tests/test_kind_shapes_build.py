"""Every shape of YAML kind the platform stage accepts generates C that builds (warning-free) and
computes what onnxruntime computes.

An accepted kind whose C then failed its own `_Static_assert` (an accelerator without `memory:`)
was reported as the user's build failure; each shape below is one way a kind file may legitimately
be written, with a small model pinned onto the device so that its code is generated and run.
"""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import hetgen
from hetgen.platform import load_platform
from hetgen.runtime.reference import ort_session, random_inputs
from hetgen.templates_dir import templates_dir

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

FIGURES = "    figures: {peak_gflops: 4, bandwidth_gbps: 4, launch_us: 3}\n"
PATTERNS = '    patterns:\n      - {label: binary, chain: [Add, "Relu?"], where: {dtype: float32}}\n'

SHAPES = {
    "accelerator_without_memory": FIGURES + PATTERNS,
    "accelerator_with_null_memory": FIGURES + "    memory: {local_bytes: null}\n" + PATTERNS,
    "accelerator_with_tiled_memory": (
        "    attributes: {kib: {type: int, default: 16, minimum: 1}}\n"
        + FIGURES
        + '    memory: {local_bytes: "kib * 1024"}\n'
        + PATTERNS
    ),
    "accelerator_with_simulator_attributes_at_their_bounds": (
        "    attributes:\n"
        "      clock_mhz: {type: float, default: 0.5}\n"
        "      vector_lanes: {type: int, default: 1}\n"
        "      macs_per_cycle: {type: int, default: 1}\n"
        "      mac_rows: {type: int, default: 1}\n"
        "      sram_bytes_per_cycle: {type: float, default: 0.25}\n"
        "      dma_setup_cycles: {type: int, default: 0}\n"
        "      command_cycles: {type: int, default: 0}\n"
        "      invoke_cycles: {type: int, default: 4294967295}\n"
        + FIGURES
        + "    memory: {local_bytes: 8192}\n"
        + PATTERNS
    ),
    "accelerator_with_its_own_toolchain": FIGURES + "    toolchain: {cc: cc, cflags: [-O1]}\n" + PATTERNS,
    "accelerator_with_a_templates_folder": FIGURES + "    templates: own_templates\n" + PATTERNS,
    "refinement_of_the_npu": "    refines: npu\n    attributes: {sram_kib: {default: 64}}\n",
}


def model() -> onnx.ModelProto:
    shape = [1, 3, 40]
    nodes = [
        helper.make_node("Add", ["x", "y"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["z"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "shapes",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "y")],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def platform_text(body: str) -> str:
    role = "" if "refines:" in body else "    role: accelerator\n"
    return f"name: board\nkinds:\n  dsp:\n{role}{body}target:\n  kind: native\n  devices:\n    dsp0: dsp\n"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_accepted_kind_shape_builds_and_computes(shape: str, tmp_path):
    folder = tmp_path / "own_templates" / "kernels"
    folder.mkdir(parents=True)
    shutil.copy(templates_dir() / "kernels" / "elementwise.c.j2", folder / "elementwise.c.j2")
    path = tmp_path / "platform.yaml"
    path.write_text(platform_text(SHAPES[shape]))
    load_platform(str(path))  # accepted: otherwise this shape is not one to build
    proto = model()
    pins = {"add": "board/dsp0", "relu": "board/dsp0"}
    out = hetgen.compile(str(path), proto, out=tmp_path / "out", pins=pins, native_only=True, opt=("-O1",), werror=True)
    assert list((out / "board" / "dsp0" / "kernels").glob("*.c")), "the device got no kernel"
    feeds = random_inputs(hetgen.load(out).inputs, seed=5)
    expected = ort_session(proto.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(hetgen.load(out).run(feeds)["z"], expected, rtol=1e-6, atol=1e-6)


ROOTS = {
    "controller_from_scratch": "    role: controller\n" + FIGURES,
    "controller_with_memory_bounds": (
        "    role: controller\n" + FIGURES + '    memory: {address_bytes: "2 ** 32", static_bytes: 65536}\n'
    ),
    "refinement_of_native": "    refines: native\n    toolchain: {cflags: [-O1]}\n",
}


@pytest.mark.parametrize("shape", sorted(ROOTS))
def test_accepted_controller_kind_shape_builds_and_computes(shape: str, tmp_path):
    path = tmp_path / "platform.yaml"
    path.write_text(f"name: board\nkinds:\n  cpu0:\n{ROOTS[shape]}target: cpu0\n")
    proto = model()
    out = hetgen.compile(str(path), proto, out=tmp_path / "out", native_only=True, opt=("-O1",), werror=True)
    feeds = random_inputs(hetgen.load(out).inputs, seed=5)
    expected = ort_session(proto.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(hetgen.load(out).run(feeds)["z"], expected, rtol=1e-6, atol=1e-6)


def test_accepted_composite_kind_from_scratch_builds_and_computes(tmp_path):
    path = tmp_path / "platform.yaml"
    path.write_text(
        "name: board\nkinds:\n  box: {role: composite, doc: a card with its own controller}\n"
        "target:\n  kind: native\n  devices:\n    card:\n      kind: box\n"
        "      link: {bandwidth_gbps: 8, latency_us: 2}\n      host: {kind: native, runtime: graph}\n"
        "      devices: {acc: {kind: npu, sram_kib: 64}}\n"
    )
    proto = model()
    pins = {"add": "board/card/acc"}
    out = hetgen.compile(str(path), proto, out=tmp_path / "out", pins=pins, native_only=True, opt=("-O1",), werror=True)
    assert list((out / "board" / "card" / "acc" / "kernels").glob("*.c")), "the device got no kernel"
    feeds = random_inputs(hetgen.load(out).inputs, seed=5)
    expected = ort_session(proto.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(hetgen.load(out).run(feeds)["z"], expected, rtol=1e-6, atol=1e-6)

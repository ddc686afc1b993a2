"""The kernel table as its own stage (issue 8, item 6): every operator is lowered once, before
placement; placement reads work and memory fit from the table as data and lowering takes its
kernels from it, so neither re-runs a lowering, and a lowering that fails is never silently
replaced by a guess."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from hetgen import lower, pipeline
from hetgen.codegen.encode import Opcode, encode_steps
from hetgen.codegen.manifest import CounterEntry, Manifest
from hetgen.codegen.viewmodel import aot_steps, graph_tables, vm_code
from hetgen.errors import InternalError, ModelError
from hetgen.frontend import import_model
from hetgen.lower.program import Invoke
from hetgen.lower.verify import verified
from hetgen.models import mobilenet_v2, resnet, tiny_cnn
from hetgen.ops import registry
from hetgen.ops.base import Unsupported
from hetgen.partition.search import place
from hetgen.partition.units import kernel_units
from hetgen.platform.loader import load_platform
from hetgen.spec import build_kernel_specs
from hetgen.spec.invocation import kernel_units_of

PLATFORMS = Path(__file__).resolve().parent.parent / "platforms"


def test_each_node_and_each_unit_it_can_head_is_lowered_once_and_nothing_after(counted):
    graph = import_model(tiny_cnn())
    kernels = build_kernel_specs(graph)
    assert sum(counted.values()) == len(kernels.units)  # once per unit, nothing more
    assert all((node.name,) in kernels.units for node in graph.nodes)
    fused = [names for names in kernels.units if len(names) > 1]
    assert fused, "tiny_cnn has Conv -> Relu chains"
    counted.clear()
    platform = load_platform(str(PLATFORMS / "host.yaml"))
    placement = place(graph, platform, kernels=kernels)
    lowered = lower.lower(graph, platform, placement)
    assert counted == {}  # placement and lowering read the table; neither lowers an operator again
    labels = [unit.label for program in lowered.programs for unit in program.units]
    assert any("Relu" in label and "Conv" in label for label in labels)  # the fused unit was used


def test_a_unit_spec_carries_its_resolved_epilogue_and_work():
    graph = import_model(mobilenet_v2(opset=13))  # Clip's bounds are inputs at opset 13
    kernels = build_kernel_specs(graph)
    clipped = [spec for spec in kernels.units.values() if spec.epilogue and spec.epilogue[-1].kind == "Clip"]
    assert clipped
    for spec in clipped:
        assert (spec.epilogue[-1].alpha, spec.epilogue[-1].beta) == (0.0, 6.0)
        assert spec.op == "Conv" and spec.kernel is not None and spec.refusal is None
        assert spec.flops == spec.kernel.flops > 0 and spec.device_work.m > 0
    conv = kernels.node(clipped[0].nodes[0])
    assert conv.epilogue == () and conv.flops == clipped[0].flops  # the activation is free


def test_the_table_is_frozen():
    kernels = build_kernel_specs(import_model(tiny_cnn()))
    spec = next(iter(kernels.units.values()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.flops = 0.0
    with pytest.raises(TypeError):
        kernels.units[("x",)] = spec


def test_an_unsupported_instance_is_a_refusal_in_the_lowerings_words(monkeypatch):
    def refuse(instance):
        raise Unsupported("this Conv is not for us")

    monkeypatch.setitem(registry.OPS, "Conv", dataclasses.replace(registry.OPS["Conv"], lower=refuse))
    graph = import_model(tiny_cnn())
    kernels = build_kernel_specs(graph)
    conv = next(node for node in graph.nodes if node.op == "Conv")
    spec = kernels.node(conv.name)
    assert spec.kernel is None and spec.refusal == "this Conv is not for us"
    assert spec.flops > 0 and spec.bytes > 0  # placement still prices it, from its shapes
    platform = load_platform(str(PLATFORMS / "host.yaml"))
    placement = place(graph, platform, kernels=kernels)
    with pytest.raises(ModelError, match=f"{conv.label}: this Conv is not for us"):
        lower.lower(graph, platform, placement)


def test_a_lowering_that_crashes_is_a_bug_not_a_guess(monkeypatch):
    """Placement used to swallow any exception of a lowering and estimate from shapes instead."""

    def broken(instance):
        raise ZeroDivisionError("a bug in the Relu lowering")

    monkeypatch.setitem(registry.OPS, "Relu", dataclasses.replace(registry.OPS["Relu"], lower=broken))
    graph = import_model(tiny_cnn())
    with pytest.raises(ZeroDivisionError):
        place(graph, load_platform(str(PLATFORMS / "soc.yaml")))


def test_placement_and_lowering_cut_a_group_into_the_same_units():
    graph = import_model(mobilenet_v2())
    kernels = build_kernel_specs(graph)
    everywhere = {node.name: "one target" for node in graph.nodes}
    lowered = [unit.names for unit in kernel_units(graph, everywhere, kernels)]
    priced = [tuple(node.name for node in chain) for chain, _ in kernel_units_of(graph.nodes, graph, kernels)]
    assert lowered == priced
    assert any(len(names) > 1 for names in lowered)


def test_generation_builds_the_table_once(monkeypatch):
    built = []

    def build_once(graph, platform):
        built.append(graph)
        return build_kernel_specs(graph, platform)

    def never(*args):
        raise AssertionError("a stage built its own kernel table")

    monkeypatch.setattr(pipeline, "build_kernel_specs", build_once)
    monkeypatch.setattr("hetgen.partition.search.build_kernel_specs", never)  # only for a caller without one
    platform = load_platform(str(PLATFORMS / "soc.yaml"))
    graph = import_model(tiny_cnn())
    pipeline.generate_files(platform, graph, pipeline.CompileOptions(build=False), tiny_cnn(), Path("unused"))
    assert len(built) == 1


# -- the lowered program's own verify() ------------------------------------------------------------


@pytest.fixture(scope="module")
def lowered_soc():
    graph = import_model(resnet())  # its convolutions go to the npu
    platform = load_platform(str(PLATFORMS / "soc.yaml"))
    return lower.lower(graph, platform, place(graph, platform))  # lower verifies what it returns


def test_a_target_keys_a_table_as_the_device_its_path_names():
    platform, again = (load_platform(str(PLATFORMS / "soc.yaml")) for _ in range(2))
    by_target = {target: target.path_str for target in platform.targets()}
    assert len(by_target) == len(platform.targets()) == 4
    assert [by_target[target] for target in again.targets()] == list(by_target.values())  # a reload finds them
    npu = next(t for t in platform.targets() if t.path_str.endswith("npu0"))
    resized = dataclasses.replace(npu, memory_bytes=npu.memory_bytes * 2)
    assert hash(resized) == hash(npu) and resized != npu  # the same place, another device: not equal


def _with_program(lowered, index, **changes):
    programs = list(lowered.programs)
    programs[index] = dataclasses.replace(programs[index], **changes)
    return dataclasses.replace(lowered, programs=tuple(programs))


def _device_index(lowered):
    return next(i for i, p in enumerate(lowered.programs) if p.device_model is not None)


def test_verify_refuses_buffers_that_share_bytes_while_live(lowered_soc):
    index = _device_index(lowered_soc)
    memory = lowered_soc.programs[index].memory
    assert len(memory.buffers) > 1
    stacked = dataclasses.replace(memory, buffers=tuple((name, 0, size) for name, _, size in memory.buffers))
    with pytest.raises(InternalError, match="share bytes while both are live"):
        verified(_with_program(lowered_soc, index, memory=stacked))


def test_verify_refuses_a_call_to_another_programs_kernel(lowered_soc):
    index = _device_index(lowered_soc)
    with pytest.raises(InternalError, match="which is not one of its kernels"):
        verified(_with_program(lowered_soc, index, units=lowered_soc.root.units))


def test_verify_refuses_an_invocation_of_a_missing_sub_program(lowered_soc):
    root = lowered_soc.root
    entries = tuple(
        tuple(dataclasses.replace(step, program=99) if isinstance(step, Invoke) else step for step in entry)
        for entry in root.entries
    )
    with pytest.raises(InternalError, match="invokes sub-program 99"):
        verified(_with_program(lowered_soc, 0, entries=entries))


# -- the codegen-to-runtime manifest is a typed value ------------------------------------------------


def test_the_manifest_is_a_typed_value_that_round_trips_through_hetgen_json():
    model = resnet()
    platform = load_platform(str(PLATFORMS / "soc.yaml"))
    graph = import_model(model)
    _, _, files = pipeline.generate_files(platform, graph, pipeline.CompileOptions(build=False), model, Path("x"))
    written = next(f.content for f in files if f.path == "hetgen.json")
    manifest = Manifest.from_json(json.loads(written))
    assert manifest.to_bytes() == written  # every key is a field: nothing travels as a loose dict
    assert manifest.inputs[0].shape == (1, 3, 32, 32) and manifest.board is not None
    simulated = [t for t in manifest.targets if t.simulator is not None]
    assert simulated and all(isinstance(c, CounterEntry) for t in simulated for c in t.simulator.counters)
    assert {c.what for t in simulated for c in t.simulator.counters} >= {"kernel"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        manifest.prefix = "other"


# -- one encoder of program steps, laid out per runtime --------------------------------------------


def test_every_runtime_lays_out_the_same_instructions(lowered_soc):
    """The VM's bytecode, the graph runtime's node table and the straight-line C come from one
    encoding of each step: same operations, devices and byte counts, in the same order."""
    for program in lowered_soc.programs:
        for steps in program.entries:
            instructions = encode_steps(steps)
            kernel_index = {unit.fn: index for index, unit in enumerate(program.units)}
            vm = [words for words, _ in vm_code(steps, kernel_index)]
            nodes, _ = graph_tables(steps)
            aot = aot_steps(steps)
            assert [words[0] for words in vm] == [ins.opcode.value for ins in instructions] + [Opcode.END.value]
            assert [node["op"] for node in nodes] == [ins.opcode.c_name for ins in instructions]
            assert [step["kind"] for step in aot] == [ins.opcode.name.lower() for ins in instructions]
            assert [node["bytes"] for node in nodes] == [ins.nbytes for ins in instructions]
            copies = [(s["device"], s["nbytes"]) for s in aot if s["kind"] in ("copy_in", "copy_out")]
            assert copies == [
                (i.device, i.nbytes) for i in instructions if i.opcode in (Opcode.COPY_IN, Opcode.COPY_OUT)
            ]


def test_tilings_are_planned_with_the_table_and_only_read_after(monkeypatch):
    """The fits_memory predicate, the cost model, explain's tiling lines and lowering all read the
    table's tile plans: none of them plans a tiling again."""
    import hetgen.spec.tiling as tiling

    graph = import_model(resnet(size=96))
    platform = load_platform(str(PLATFORMS / "soc.yaml"))
    kernels = build_kernel_specs(graph, platform)
    assert kernels.plans and any(getattr(plan, "count", 1) > 1 for plan in kernels.plans.values())
    planned = []
    monkeypatch.setattr(tiling, "_best_plan", lambda *args: planned.append(args))  # what unit_plan calls
    placement = place(graph, platform, kernels=kernels)
    lowered = lower.lower(graph, platform, placement)
    assert planned == []
    npu = next(program for program in lowered.programs if program.device_model is not None)
    assert npu.units and any(group.tilings for group in placement.groups)

"""The VM and the graph executor refuse corrupt programs with an error code, never an out-of-bounds
access: real programs from a lowered model, then hundreds of seeded mutations of them (word flips,
out-of-range values, truncation, insertion), each run by a C harness under ASan and UBSan against
exactly-sized memory. Targeted cases check that each kind of corruption is refused."""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from hetgen import frontend, lower
from hetgen.codegen.viewmodel import OPCODES, graph_tables, vm_code
from hetgen.lower.program import Region
from hetgen.partition.search import place
from hetgen.platform.loader import load_platform_text
from test_reentrant import PINS, small_model

pytestmark = pytest.mark.cc  # every test here builds C (docs/testing.md)

HERE = Path(__file__).resolve().parent
RUNTIME = HERE.parent / "templates" / "runtime"
HG_OK, HG_ERR_BYTECODE, HG_ERR_DEVICE = 0, -2, -3
ERROR_CODES = {0, -1, -2, -3, -4}
PLATFORM = """
name: soc
target:
  kind: aarch64
  runtime: {root}
  devices:
    vdevice0:
      kind: accelerator-with-coprocessor
      link: {{bandwidth_gbps: 4, latency_us: 1}}
      host: {{kind: riscv64, runtime: {coprocessor}}}
      devices:
        npu0: {{kind: npu, sram_kib: 512}}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed for the sanitizer harness")
    exe = tmp_path_factory.mktemp("harness") / "harness"
    sources = [HERE / "c" / "runtime_checks_harness.c", *(RUNTIME / f for f in ("hg_vm.c", "hg_graph.c", "hg_sim.c"))]
    flags = ["-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined"]
    flags += ["-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
    subprocess.run(["gcc", *flags, "-I", str(RUNTIME), *map(str, sources), "-o", str(exe)], check=True)
    return exe


def lowered_programs(root: str, coprocessor: str):
    platform = load_platform_text(PLATFORM.format(root=root, coprocessor=coprocessor))
    graph = frontend.import_model(small_model())
    return lower.lower(graph, platform, place(graph, platform, pins=PINS)).programs


def memory_words(program, by_path) -> list[int]:
    """The harness's memory description of one program: its regions, kernels and devices."""
    words = [program.memory.arena_size, program.weights.size]
    words += [len(program.inputs), *(t.type.nbytes for t in program.inputs)]
    words += [len(program.outputs), *(t.type.nbytes for t in program.outputs)]
    words += [len(program.units), len(program.workspace.children)]
    for child in program.workspace.children:
        words += [by_path[child.path].memory.arena_size, len(by_path[child.path].entries)]
    return words


def vm_words(steps, program) -> list[int]:
    index = {unit.fn: i for i, unit in enumerate(program.units)}
    return [word for words, _ in vm_code(steps, index) for word in words]


def graph_words(steps, program) -> list[int]:
    nodes, args = graph_tables(steps)
    index = {unit.fn: i for i, unit in enumerate(program.units)}
    region = {f"HG_REGION_{r.name}": r.value for r in Region}
    words = [len(nodes)]
    for n in nodes:
        fn = index.get(n["fn"], 0xFFFF)
        words += [OPCODES[n["op"][6:]], n["device"], fn, n["first_arg"], n["num_args"]]
        words += [n["bytes"] & 0xFFFFFFFF, n["bytes"] >> 32]
    words.append(len(args))
    for a in args:
        words += [region[a["region"]], a["index"], a["offset"] & 0xFFFFFFFF, a["offset"] >> 32]
    return words


def real_cases() -> list[tuple[str, list[int], list[int]]]:
    """(name, memory description, program words) for every entry of every controller."""
    cases = []
    for root, coprocessor in (("vm", "graph"), ("graph", "vm")):
        programs = lowered_programs(root, coprocessor)
        by_path = {p.target.path_str: p for p in programs}
        for program in programs:
            for number, steps in enumerate(program.entries):
                encode = vm_words if program.runtime.value == "vm" else graph_words
                kind = 0 if program.runtime.value == "vm" else 1
                name = f"{program.target.path_str} ({program.runtime.value}) entry {number}"
                cases.append((name, [kind, *memory_words(program, by_path)], encode(steps, program)))
    return cases


def run_harness(harness: Path, path: Path, memory: list[int], program: list[int]) -> int:
    path.write_bytes(struct.pack(f"<{len(memory) + 1 + len(program)}I", *memory, len(program), *program))
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0"}  # the harness never frees its regions
    result = subprocess.run([str(harness), str(path)], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0 and not result.stderr, (
        f"{path.name}: exit {result.returncode}\n{result.stderr[-3000:]}"
    )
    status = int(result.stdout.split()[1])
    assert status in ERROR_CODES, result.stdout
    return status


def test_real_programs_run_cleanly(harness, tmp_path):
    cases = real_cases()
    kinds = {memory[0] for _, memory, _ in cases}
    assert kinds == {0, 1}  # both executors are exercised
    for name, memory, program in cases:
        assert run_harness(harness, tmp_path / "p.bin", memory, program) == HG_OK, name


def mutate(words: list[int], rng: random.Random, sizes: list[int]) -> list[int]:
    words = list(words)
    interesting = [0, 1, 2, 5, 6, 7, 63, 64, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, *sizes, *(s + 1 for s in sizes)]
    for _ in range(rng.choice([1, 1, 2, 3])):
        what = rng.random()
        at = rng.randrange(len(words)) if words else 0
        if what < 0.35 and words:
            words[at] ^= 1 << rng.randrange(32)
        elif what < 0.75 and words:
            words[at] = rng.choice(interesting)
        elif what < 0.85:
            words = words[: rng.randrange(len(words) + 1)]
        elif what < 0.95:
            words.insert(at, rng.choice(interesting))
        elif words:
            del words[at]
    return words


def test_corrupt_programs_are_refused_without_out_of_bounds_access(harness, tmp_path):
    rng = random.Random(6)
    outcomes = {}
    for name, memory, program in real_cases():
        sizes = [word for word in memory[1:] if word > 2]
        for trial in range(40):
            path = tmp_path / f"{name.replace('/', '_').replace(' ', '_')}-{trial}.bin"  # kept for replay
            status = run_harness(harness, path, memory, mutate(program, rng, sizes))
            outcomes[status] = outcomes.get(status, 0) + 1
    print("outcomes of", sum(outcomes.values()), "mutated programs by status:", outcomes)
    assert sum(outcomes.values()) >= 300
    assert outcomes.get(HG_ERR_BYTECODE, 0) > 50, outcomes  # the checks really fire


def _ref(region: Region, index: int = 0, offset: int = 0) -> list[int]:
    return [region.value, index, offset & 0xFFFFFFFF, offset >> 32]


# A minimal memory: arena 256 B, weights 128 B, one 64 B input, one 32 B output, 2 kernels,
# one device with 512 B of memory and one program.
MEMORY = [0, 256, 128, 1, 64, 1, 32, 2, 1, 512, 1]
CALL, COPY, COPY_IN, COPY_OUT, INVOKE, WAIT, END = (
    OPCODES[name] for name in ("CALL", "COPY", "COPY_IN", "COPY_OUT", "INVOKE", "WAIT", "END")
)

VM_CASES = {
    "valid": ([CALL, 1, 2, *_ref(Region.INPUT), *_ref(Region.ARENA, 0, 192), END], HG_OK),
    "copies at the edges": (
        [
            COPY,
            *_ref(Region.INPUT),
            *_ref(Region.ARENA, 0, 192),
            64,
            0,
            COPY_IN,
            0,
            *_ref(Region.WEIGHTS),
            384,
            0,
            128,
            0,
        ]
        + [INVOKE, 0, 0, WAIT, 0, COPY_OUT, 0, 480, 0, *_ref(Region.OUTPUT), 32, 0, END],
        HG_OK,
    ),
    "unknown opcode": ([9, END], HG_ERR_BYTECODE),
    "no END": ([WAIT, 0], HG_ERR_BYTECODE),
    "truncated instruction": ([CALL, 0, 1, 1, 0], HG_ERR_BYTECODE),
    "kernel index": ([CALL, 2, 0, END], HG_ERR_BYTECODE),
    "argument count": ([CALL, 0, 65, END], HG_ERR_BYTECODE),
    "arguments past the end": ([CALL, 0, 2, *_ref(Region.ARENA), END], HG_ERR_BYTECODE),
    "arena offset": ([CALL, 0, 1, *_ref(Region.ARENA, 0, 257), END], HG_ERR_BYTECODE),
    "huge arena offset": ([CALL, 0, 1, *_ref(Region.ARENA, 0, 1 << 63), END], HG_ERR_BYTECODE),
    "weights offset": ([CALL, 0, 1, *_ref(Region.WEIGHTS, 0, 129), END], HG_ERR_BYTECODE),
    "input index": ([CALL, 0, 1, *_ref(Region.INPUT, 1), END], HG_ERR_BYTECODE),
    "output index": ([CALL, 0, 1, *_ref(Region.OUTPUT, 7), END], HG_ERR_BYTECODE),
    "index on an offset region": ([CALL, 0, 1, *_ref(Region.ARENA, 1), END], HG_ERR_BYTECODE),
    "unknown region": ([CALL, 0, 1, 9, 0, 0, 0, END], HG_ERR_BYTECODE),
    "device region on the host": ([CALL, 0, 1, *_ref(Region.DEVICE), END], HG_ERR_BYTECODE),
    "copy past the arena": ([COPY, *_ref(Region.ARENA), *_ref(Region.ARENA, 0, 200), 64, 0, END], HG_ERR_BYTECODE),
    "copy past an input": ([COPY, *_ref(Region.INPUT), *_ref(Region.ARENA), 65, 0, END], HG_ERR_BYTECODE),
    "copy size wraps": (
        [COPY, *_ref(Region.ARENA, 0, 8), *_ref(Region.ARENA), 0xFFFFFFFF, 0xFFFFFFFF, END],
        HG_ERR_BYTECODE,
    ),
    "device index": ([WAIT, 1, END], HG_ERR_BYTECODE),
    "copy into the device past its memory": ([COPY_IN, 0, *_ref(Region.ARENA), 480, 0, 64, 0, END], HG_ERR_DEVICE),
    "copy out of the device past its memory": ([COPY_OUT, 0, 500, 0, *_ref(Region.ARENA), 16, 0, END], HG_ERR_DEVICE),
    "device program": ([INVOKE, 0, 1, END], HG_ERR_DEVICE),
}


@pytest.mark.parametrize("case", sorted(VM_CASES))
def test_vm_refuses_each_kind_of_corruption(harness, tmp_path, case):
    program, expected = VM_CASES[case]
    assert run_harness(harness, tmp_path / "vm.bin", MEMORY, program) == expected


def _node(op, device=0, fn=0, first_arg=0, num_args=0, nbytes=0) -> list[int]:
    return [op, device, fn, first_arg, num_args, nbytes & 0xFFFFFFFF, nbytes >> 32]


GRAPH_CASES = {
    "valid": (
        [_node(CALL, num_args=2), _node(COPY, first_arg=1, num_args=2, nbytes=32)],
        [_ref(Region.INPUT), _ref(Region.ARENA, 0, 224), _ref(Region.OUTPUT)],
        HG_OK,
    ),
    "unknown opcode": ([_node(7)], [], HG_ERR_BYTECODE),
    "missing kernel": ([_node(CALL, fn=5, num_args=1)], [_ref(Region.ARENA)], HG_ERR_BYTECODE),
    "arguments past the table": ([_node(CALL, first_arg=1, num_args=1)], [_ref(Region.ARENA)], HG_ERR_BYTECODE),
    "first argument wraps": ([_node(CALL, first_arg=0xFFFFFFFF, num_args=2)], [_ref(Region.ARENA)], HG_ERR_BYTECODE),
    "arena offset": ([_node(CALL, num_args=1)], [_ref(Region.ARENA, 0, 300)], HG_ERR_BYTECODE),
    "copy past the output": (
        [_node(COPY, num_args=2, nbytes=33)],
        [_ref(Region.ARENA), _ref(Region.OUTPUT)],
        HG_ERR_BYTECODE,
    ),
    "copy with one argument": (
        [_node(COPY, num_args=1, nbytes=4)],
        [_ref(Region.ARENA), _ref(Region.ARENA)],
        HG_ERR_BYTECODE,
    ),
    "copy-in to a host region": (
        [_node(COPY_IN, num_args=2, nbytes=4)],
        [_ref(Region.ARENA), _ref(Region.ARENA)],
        HG_ERR_BYTECODE,
    ),
    "copy-in past the device": (
        [_node(COPY_IN, num_args=2, nbytes=64)],
        [_ref(Region.ARENA), _ref(Region.DEVICE, 0, 500)],
        HG_ERR_DEVICE,
    ),
    "device index": ([_node(WAIT, device=3)], [], HG_ERR_BYTECODE),
}


@pytest.mark.parametrize("case", sorted(GRAPH_CASES))
def test_graph_executor_refuses_each_kind_of_corruption(harness, tmp_path, case):
    nodes, args, expected = GRAPH_CASES[case]
    program = [len(nodes), *(w for n in nodes for w in n), len(args), *(w for a in args for w in a)]
    memory = [1, *MEMORY[1:]]
    assert run_harness(harness, tmp_path / "graph.bin", memory, program) == expected

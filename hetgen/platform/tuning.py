"""The platform options that `hetgen tune` writes and the memory budget choice:

    options:
      tuning: {mc: 128, kc: 384, nc: 2048}   # the GEMM's cache blocks, measured on the machine
      memory: lean                            # or fast

`tuning` sets the cache blocks of the GEMM every CPU controller of the platform runs (the generated
runtime/hg_gemm_config.h, shared by all of them, and each kernel's workspace). `memory: lean` (the
default) keeps the program's arena and packed weights within 10 % of the model's weights plus the
liveness lower bound of its activations, taking layouts that grow the weights (Winograd's) only
where that budget allows and giving a layer smaller GEMM blocks where its workspace would lift
the activation peak (hetgen/partition/prepack.py); `fast` takes the layouts everywhere and keeps the
platform's blocks. Both are parsed here, at the edge, and
read through `gemm_blocks` and `memory_mode` so no raw dict travels further.
"""

from __future__ import annotations

from collections.abc import Mapping

from hetgen.ops._gemm_plan import DEFAULT_BLOCKS, GemmBlocks
from hetgen.platform.model import FrozenMap, Platform
from hetgen.platform.schema import Problems, check_keys, expect_map, read_number, read_str
from hetgen.platform.yaml_positions import YNode

TUNING_KEYS = ("mc", "kc", "nc")
MEMORY_MODES = ("lean", "fast")
DEFAULT_MEMORY = "lean"


def parse_tuning(node: YNode, problems: Problems) -> FrozenMap | None:
    """`tuning: {mc, kc, nc}` as a FrozenMap of ints (the keys given; hetgen's defaults for the rest),
    or None after adding every problem, each at its value's line."""
    body = expect_map(node, "'tuning' of options", problems, node.pos)
    if body is None:
        return None
    check_keys(body, TUNING_KEYS, "'tuning' of options", problems)
    values = dict(vars(DEFAULT_BLOCKS))
    broken = False
    for key in TUNING_KEYS:
        value_node = body.get(key)
        if value_node is None:
            continue
        value = read_number(value_node, f"'{key}' of options.tuning", problems, integer=True, minimum=1)
        if value is None:
            broken = True
            continue
        wrong = [line for line in GemmBlocks(**{**values, key: value}).problems() if line.startswith(f"'{key}'")]
        for line in wrong:
            problems.add(value_node.pos, f"{line} (options.tuning; `hetgen tune` writes measured values)")
        broken |= bool(wrong)
        values[key] = value
    return None if broken else FrozenMap(values)


def parse_memory(node: YNode, problems: Problems) -> str | None:
    return read_str(node, "'memory' of options", problems, MEMORY_MODES)


def gemm_blocks(platform: Platform) -> GemmBlocks:
    """The GEMM's cache blocks for this platform's CPUs: its `options.tuning`, else the defaults."""
    tuning: Mapping | None = platform.options.get("tuning")
    return GemmBlocks(**tuning) if tuning else DEFAULT_BLOCKS


def memory_mode(platform: Platform) -> str:
    """`lean` (the default: stay within the memory bound) or `fast` (grow weights where it is faster)."""
    return platform.options.get("memory") or DEFAULT_MEMORY


# options.layout: the channel layout of convolution runs on CPU controllers (hetgen/partition/blocked_layout.py)
LAYOUTS = ("nchw", "nchwc", "nchw4c", "nchw8c", "nchw16c")


def parse_layout(node: YNode, problems: Problems) -> str | None:
    return read_str(node, "'layout' of options", problems, LAYOUTS)

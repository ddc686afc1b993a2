"""Write the broken models in this folder (deterministic bytes; rerun after changing one).

Each `NAME.onnx` has a `NAME.expected` beside it: the first line of the error hetgen must report,
with `{file}` standing for the model's path. `tests/test_frontend.py` checks them all at import;
`tests/test_hostile_files.py` runs them all through the CLI. A second line `platform: TAG` marks a
model that imports but that platform cannot hold: its error comes from compiling for TAG.

    python tests/bad_models/make_bad_models.py
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
F = TensorProto.FLOAT


def model(nodes, inputs, outputs, inits=(), opsets=(("", 17),)):
    graph = helper.make_graph(nodes, "bad", inputs, outputs, initializer=list(inits))
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], producer_name="hetgen"
    )


def value(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def relu_model(x_shape=(2, 3), elem=F, opset=17):
    return model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [value("x", x_shape, elem)],
        [value("y", x_shape, elem)],
        opsets=(("", opset),),
    )


def external_weight_model(location: str, length: int = 64) -> bytes:
    """y = x + w, with w (4 x 4 float32, 64 bytes) stored externally at `location`."""
    weight = numpy_helper.from_array(np.zeros((4, 4), np.float32), "w")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, text in (("location", location), ("offset", "0"), ("length", str(length))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, text
    return model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [value("x", [4, 4])],
        [value("y", [4, 4])],
        inits=[weight],
    ).SerializeToString()


def huge_constant_model() -> bytes:
    """A ConstantOfShape of 1 x 2^20 x 2^20 float32 (4 TiB), added to the input and reduced."""
    shape = numpy_helper.from_array(np.array([1, 1 << 20, 1 << 20], np.int64), "shape")
    return model(
        [
            helper.make_node("ConstantOfShape", ["shape"], ["big"], name="fill"),
            helper.make_node("Add", ["big", "x"], ["sum"], name="add"),
            helper.make_node("ReduceMax", ["sum"], ["y"], keepdims=0, name="reduce"),
        ],
        [value("x", [1])],
        [value("y", [])],
        inits=[shape],
    ).SerializeToString()


def arena_too_large() -> bytes:
    """Three 1.5 GiB tensors alive at once: each fits a 2 GiB static arena, together they do not."""
    shape = numpy_helper.from_array(np.array([1, 384 << 20], np.int64), "shape")
    one, two = (numpy_helper.from_array(np.array([v], np.float32)) for v in (1, 2))
    return model(
        [
            helper.make_node("ConstantOfShape", ["shape"], ["ones"], value=one, name="ones"),
            helper.make_node("ConstantOfShape", ["shape"], ["twos"], value=two, name="twos"),
            helper.make_node("Add", ["ones", "twos"], ["sum"], name="add"),
            helper.make_node("Add", ["sum", "x"], ["shifted"], name="shift"),
            helper.make_node("ReduceMax", ["shifted"], ["y"], keepdims=0, name="reduce"),
        ],
        [value("x", [1])],
        [value("y", [])],
        inits=[shape],
    ).SerializeToString()


def non_utf8_name() -> bytes:
    """A node name that is not UTF-8 (proto2 strings are not validated when parsed). Found by fuzzing."""
    named = model([helper.make_node("Relu", ["x"], ["y"], name="reXu")], [value("x", [2, 3])], [value("y", [2, 3])])
    return named.SerializeToString().replace(b"reXu", b"re\x9bu")


def huge_declared_initializer() -> bytes:
    """An initializer that declares 2^20 x 2^20 floats and carries 4 bytes."""
    weight = TensorProto(name="w", data_type=F, dims=[1 << 20, 1 << 20], raw_data=b"\0\0\0\0")
    return model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [value("x", [1])],
        [value("y", [1 << 20, 1 << 20])],
        inits=[weight],
    ).SerializeToString()


def invalid_models() -> dict[str, tuple[bytes, str]]:
    """Models the ONNX spec forbids that used to build (issue 18): onnx's strict inference or one of
    hetgen's own rules (hetgen/frontend/rules.py) refuses each, naming the node and the rule."""
    ints = TensorProto.INT64
    concat = model(
        [helper.make_node("Concat", ["a", "b"], ["y"], axis=0, name="cat")],
        [value("a", [2, 3]), value("b", [1, 2, 3])],
        [value("y", [3, 3])],
    )
    reshape = model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="flatten")],
        [value("x", [2, 3])],
        [value("y", [6, 1])],
        inits=[numpy_helper.from_array(np.array([-1, -1], np.int64), "shape")],
    )
    dilated = model(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", dilations=[10**9, 10**9], kernel_shape=[3, 3])],
        [value("x", [1, 1, 8, 8])],
        [value("y", ["n", "c", "h", "w"])],
        inits=[numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")],
    )
    pool = model(
        [helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[5, 5], pads=[0, 0, 1, 1])],
        [value("x", [1, 1, 3, 3])],
        [value("y", ["n", "c", "h", "w"])],
    )
    then = helper.make_graph(
        [helper.make_node("Constant", [], ["t"], value=numpy_helper.from_array(np.ones(2, np.float32)))],
        "then",
        [],
        [value("t", [2])],
    )
    otherwise = helper.make_graph(
        [helper.make_node("Constant", [], ["e"], value=numpy_helper.from_array(np.ones(2, np.int64)))],
        "else",
        [],
        [value("e", [2], ints)],
    )
    branches = model(
        [
            helper.make_node("If", ["cond"], ["b"], name="choose", then_branch=then, else_branch=otherwise),
            helper.make_node("Add", ["x", "b"], ["y"], name="add"),
        ],
        [value("x", [2])],
        [value("y", [2])],
        inits=[numpy_helper.from_array(np.array(False), "cond")],
    )
    shadowing = model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [value("x", [2, 3])],
        [value("y", [2, 3])],
        inits=[numpy_helper.from_array(np.ones(4, np.float32), "x")],
    )
    shadowing.ir_version = 4
    gather = model(
        [helper.make_node("Gather", ["x", "indices"], ["y"], name="take", axis=0)],
        [value("x", [3, 2])],
        [value("y", [1, 2])],
        inits=[numpy_helper.from_array(np.array([5], np.int64), "indices")],
    )
    strict = "(onnx shape inference, strict)"
    return {
        "concat_ranks": (
            concat.SerializeToString(),
            f"{{file}}: Concat 'cat': All inputs to Concat must have same rank. Input 1 has rank 3 != 2 {strict}",
        ),
        "reshape_two_inferred": (
            reshape.SerializeToString(),
            f"{{file}}: Reshape 'flatten': Target shape may not have multiple -1 dimensions. {strict}",
        ),
        "conv_huge_dilation": (
            dilated.SerializeToString(),
            "{file}: Conv 'conv': along spatial axis 0 the window spans 2000000001 elements (3 taps at dilation "
            "1000000000), but the padded input has 8 (8 + pads 0 and 0); no output position fits",
        ),
        "maxpool_kernel_too_large": (
            pool.SerializeToString(),
            "{file}: MaxPool 'pool': along spatial axis 0 the window spans 5 elements (5 taps), but the padded "
            "input has 4 (3 + pads 0 and 1); no output position fits",
        ),
        "if_branch_types": (
            branches.SerializeToString(),
            f"{{file}}: If 'choose': Mismatched tensor element type: inferred=int64 declared=float {strict}",
        ),
        "shadowing_initializer": (
            shadowing.SerializeToString(),
            "{file}: initializer 'x' (float32 (4,)) has the name of graph input 'x', declared float32 (2, 3); "
            "an initializer named like an input is its default value and must match its type and shape",
        ),
        "gather_index_range": (
            gather.SerializeToString(),
            "{file}: Gather 'take': constant index 5 is out of range for axis 0 of 'x' (3 elements); "
            "indices must lie in [-3, 2]",
        ),
        "rank_nine": (
            relu_model(x_shape=(1,) * 9).SerializeToString(),
            "{file}: tensor 'x' (an input) has rank 9, shape (1, 1, 1, 1, 1, 1, 1, 1, 1); "
            "hetgen's runtime holds at most 8 dimensions (HG_MAX_RANK)",
        ),
    }


def bad_models() -> dict[str, tuple[bytes, str]]:
    good = relu_model().SerializeToString()
    custom = model(
        [
            helper.make_node("Foo", ["x"], ["a"], domain="com.example", name="foo"),
            helper.make_node("Bar", ["a"], ["y"], domain="com.example", name="bar"),
        ],
        [value("x", [2])],
        [value("y", [2])],
        opsets=(("", 17), ("com.example", 1)),
    )
    reshape = model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="foo")],
        [value("x", [2, 3]), value("shape", [2], TensorProto.INT64)],
        [value("y", ["a", "b"])],
    )
    two_inputs = model([helper.make_node("Add", ["x"], ["y"], name="add")], [value("x", [2])], [value("y", [2])])
    return {
        "truncated": (good[: len(good) // 2], "{file}: not an ONNX model"),
        "not_protobuf": (b"name: not a model\n", "{file}: not an ONNX model"),
        "checker_fails": (two_inputs.SerializeToString(), "{file}: the onnx checker rejects the model:"),
        "old_opset": (relu_model(opset=6).SerializeToString(), "{file}: opset 6 is not supported;"),
        "dynamic_input": (
            relu_model(x_shape=("batch", 3)).SerializeToString(),
            "{file}: input 'x' dimension 0 is dynamic ('batch'); hetgen needs static shapes",
        ),
        "bfloat16_input": (
            relu_model(elem=TensorProto.BFLOAT16).SerializeToString(),
            "{file}: input 'x' has element type bfloat16;",
        ),
        "unsupported_ops": (custom.SerializeToString(), "{file}: 2 operators are not supported by hetgen:"),
        "shape_from_input": (
            reshape.SerializeToString(),
            "{file}: Reshape 'foo': input 1 (shape) must be a compile-time constant; hetgen needs static shapes",
        ),
        "no_outputs": (
            model([helper.make_node("Relu", ["x"], ["y"])], [value("x", [2])], []).SerializeToString(),
            "{file}: the graph has no outputs",
        ),
        "bfloat16_inside": (
            model(
                [
                    helper.make_node("Cast", ["x"], ["half"], to=TensorProto.BFLOAT16, name="to_half"),
                    helper.make_node("Cast", ["half"], ["y"], to=F, name="to_float"),
                ],
                [value("x", [2])],
                [value("y", [2])],
            ).SerializeToString(),
            "{file}: element types hetgen does not support:",
        ),
        "external_missing": (
            external_weight_model("missing.bin"),
            "{file}: tensor 'w': external data file 'missing.bin' does not exist in",
        ),
        "external_short": (
            external_weight_model("short.bin"),
            "{file}: tensor 'w': external data file 'short.bin' has 8 bytes, but the model reads bytes 0 to 64;",
        ),
        "external_absolute": (
            external_weight_model("/etc/hostname"),
            "{file}: tensor 'w': external data file '/etc/hostname' is an absolute path; "
            "external data is read only from the model's folder",
        ),
        "external_escaping": (
            external_weight_model("../bad_platforms/empty.yaml"),
            "{file}: tensor 'w': external data file '../bad_platforms/empty.yaml' resolves outside the model's folder",
        ),
        "external_symlink": (
            external_weight_model("outside_link.bin"),
            "{file}: tensor 'w': external data file 'outside_link.bin' resolves outside the model's folder",
        ),
        "huge_initializer_dims": (
            huge_declared_initializer(),
            "{file}: tensor 'w' declares shape (1048576, 1048576) of float32, 4398046511104 bytes, but carries 4 bytes",
        ),
        "arena_too_large": (
            arena_too_large(),
            "host: the static arena (4831838208 bytes, largest tensor 'ones' 1610612736 bytes) and weights (32 bytes) "
            "need 4831838240 bytes; kind 'native' links at most 2147483648 bytes of static data (memory.static_bytes)"
            "\nplatform: host",
        ),
        "non_utf8_name": (
            non_utf8_name(),
            "{file}: model.graph.node[0].name is not UTF-8 text (b're\\x9bu'); names in a model must be UTF-8",
        ),
        "huge_input": (
            relu_model(x_shape=(1 << 30, 1 << 30)).SerializeToString(),
            "tensor 'x' (1073741824, 1073741824) of float32 needs 4611686018427387904 bytes; no target of platform "
            "'host' can address it (the largest address space: 281474976710656 bytes, memory.address_bytes)"
            "\nplatform: host",
        ),
        "overflowing_shape": (
            relu_model(x_shape=(1 << 40, 1 << 40)).SerializeToString(),
            "{file}: tensor 'x' (an input or constant) has shape (1099511627776, 1099511627776): "
            "4835703278458516698824704 bytes of float,",
        ),
        "negative_dimension": (
            relu_model(x_shape=(2, -3)).SerializeToString(),
            "{file}: input 'x' dimension 1 is -3; dimensions cannot be negative",
        ),
        "huge_constant_of_shape": (
            huge_constant_model(),
            "tensor 'big' (1, 1048576, 1048576) of float32 needs 4398046511104 bytes; no target of platform 'host' "
            "can hold it (the most static data or local memory: 2147483648 bytes, memory.static_bytes)"
            "\nplatform: host",
        ),
        "cycle": (
            model(
                [
                    helper.make_node("Add", ["x", "b"], ["a"], name="first"),
                    helper.make_node("Relu", ["a"], ["b"], name="second"),
                ],
                [value("x", [2])],
                [value("a", [2])],
            ).SerializeToString(),
            "{file}: the graph has a cycle: Relu 'second' -> Add 'first' -> Relu 'second'; an ONNX graph must be acyclic",
        ),
        "input_never_produced": (
            model(
                [helper.make_node("Relu", ["ghost"], ["y"], name="relu")], [value("x", [2])], [value("y", [2])]
            ).SerializeToString(),
            "{file}: Relu 'relu' reads 'ghost', which no node, graph input or initializer produces",
        ),
        "duplicate_output_names": (
            model(
                [helper.make_node("Relu", ["x"], ["y"], name="one"), helper.make_node("Neg", ["x"], ["y"], name="two")],
                [value("x", [2])],
                [value("y", [2])],
            ).SerializeToString(),
            "{file}: the onnx checker rejects the model: Graph must be in single static assignment (SSA) form, "
            "however 'y' has been used as output names multiple times.",
        ),
        "conv_bias_mismatch": (
            model(
                [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", kernel_shape=[1, 1])],
                [value("x", [1, 2, 4, 4])],
                [value("y", [1, 4, 4, 4])],
                inits=[
                    numpy_helper.from_array(np.ones((4, 2, 1, 1), np.float32), "w"),
                    numpy_helper.from_array(np.ones((3,), np.float32), "b"),  # 3 biases for 4 channels
                ],
            ).SerializeToString(),
            "{file}: the model uses operators hetgen cannot generate code for:\nplatform: host",
        ),
        "empty_graph": (model([], [], []).SerializeToString(), "{file}: the graph has no outputs"),
        "wrong_message_type": (
            numpy_helper.from_array(np.ones((2, 2), np.float32), "t").SerializeToString(),
            "{file}: not an ONNX model",
        ),
        "random_bytes": (bytes(random.Random(6).randrange(256) for _ in range(4096)), "{file}: not an ONNX model"),
        **invalid_models(),
    }


# Beside the models: the short file external_short reads, and a link out of this folder.
DATA_FILES = {"short.bin": b"\0" * 8}
LINKS = {"outside_link.bin": "../conftest.py"}


def main() -> None:
    for name, (data, expected) in bad_models().items():
        (HERE / f"{name}.onnx").write_bytes(data)
        (HERE / f"{name}.expected").write_text(expected + "\n")
    for name, data in DATA_FILES.items():
        (HERE / name).write_bytes(data)
    for name, target in LINKS.items():
        (HERE / name).unlink(missing_ok=True)
        (HERE / name).symlink_to(target)


if __name__ == "__main__":
    main()

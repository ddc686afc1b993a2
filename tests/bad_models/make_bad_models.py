"""Write the broken models in this folder (deterministic bytes; rerun after changing one).

Each `NAME.onnx` has a `NAME.expected` beside it: the first line of the error hetgen must report,
with `{file}` standing for the model's path. `tests/test_frontend.py` checks them all.

    python tests/bad_models/make_bad_models.py
"""

from __future__ import annotations

from pathlib import Path

from onnx import TensorProto, helper

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
        "float16_input": (
            relu_model(elem=TensorProto.FLOAT16).SerializeToString(),
            "{file}: input 'x' has element type float16;",
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
        "float16_inside": (
            model(
                [
                    helper.make_node("Cast", ["x"], ["half"], to=TensorProto.FLOAT16, name="to_half"),
                    helper.make_node("Cast", ["half"], ["y"], to=F, name="to_float"),
                ],
                [value("x", [2])],
                [value("y", [2])],
            ).SerializeToString(),
            "{file}: element types hetgen does not support:",
        ),
    }


def main() -> None:
    for name, (data, expected) in bad_models().items():
        (HERE / f"{name}.onnx").write_bytes(data)
        (HERE / f"{name}.expected").write_text(expected + "\n")


if __name__ == "__main__":
    main()

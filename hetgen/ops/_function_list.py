"""Operators hetgen compiles through their ONNX function body.

ONNX defines these operators as functions of simpler ones (a body per opset, or one built from the
node's attributes and input types). The frontend (`hetgen/frontend/functions.py`) replaces each
node of these operators by its body before anything else sees the graph, so their kernels are the
registered primitives' kernels; listing an operator here claims it.
"""

EXPANDED_OPS: frozenset[str] = frozenset(
    {
        "Attention",
        "BlackmanWindow",
        "CenterCropPad",
        "GroupNormalization",
        "HammingWindow",
        "HannWindow",
        "MeanVarianceNormalization",
        "NegativeLogLikelihoodLoss",
        "RMSNormalization",
        "RotaryEmbedding",
        "SoftmaxCrossEntropyLoss",
        "AffineGrid",
        "SwiGLU",
        "LinearAttention",  # its body is a Scan, unrolled
        # no ONNX body: hetgen writes one (hetgen/frontend/functions.py, HETGEN_BODIES)
        "LpNormalization",
        "LpPool",
        "CausalConvWithState",
    }
)

# Inputs of expanded operators that must be known at compile time (they set an output's shape).
EXPANDED_CONST_INPUTS: dict[str, tuple[int, ...]] = {
    "AffineGrid": (1,),
    "BlackmanWindow": (0,),
    "CenterCropPad": (1,),
    "HammingWindow": (0,),
    "HannWindow": (0,),
}

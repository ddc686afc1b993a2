"""Small ONNX models with seeded random weights, for tests, examples and benchmarks.

Every builder takes `opset` (7..21; the transformer needs 9+) and `seed`, returns a checked
`onnx.ModelProto`, and produces the same bytes for the same arguments. `BUILDERS` lists them by name.
"""

from __future__ import annotations

from hetgen.models.cnn import (
    alexnet,
    densenet,
    googlenet,
    inception,
    mobilenet_v2,
    resnet,
    shufflenet,
    squeezenet,
    unet,
    vgg,
)
from hetgen.models.imagenet import efficientnet_lite, mobilenet_v3_small
from hetgen.models.lenet import lenet5
from hetgen.models.mlperf_tiny import ds_cnn, fc_autoencoder, mobilenet_v1_vww, resnet8
from hetgen.models.recurrent import gru_classifier, lstm_classifier
from hetgen.models.tiny import mlp, tiny_cnn
from hetgen.models.transformer import transformer_encoder

BUILDERS = {
    "mlp": mlp,
    "tiny_cnn": tiny_cnn,
    "lenet5": lenet5,
    "resnet": resnet,
    "mobilenet_v2": mobilenet_v2,
    "squeezenet": squeezenet,
    "googlenet": googlenet,
    "densenet": densenet,
    "vgg": vgg,
    "alexnet": alexnet,
    "shufflenet": shufflenet,
    "transformer_encoder": transformer_encoder,
    "unet": unet,
    "mobilenet_v3_small": mobilenet_v3_small,
    "efficientnet_lite": efficientnet_lite,
    "gru_classifier": gru_classifier,
    "lstm_classifier": lstm_classifier,
    # MLPerf Tiny's four reference networks (hetgen.models.mlperf_tiny)
    "ds_cnn": ds_cnn,
    "mobilenet_v1_vww": mobilenet_v1_vww,
    "resnet8": resnet8,
    "fc_autoencoder": fc_autoencoder,
}

__all__ = [
    "BUILDERS",
    "efficientnet_lite",
    "gru_classifier",
    "lstm_classifier",
    "mobilenet_v3_small",
    "unet",
    "alexnet",
    "densenet",
    "ds_cnn",
    "fc_autoencoder",
    "googlenet",
    "inception",
    "lenet5",
    "mlp",
    "mobilenet_v1_vww",
    "mobilenet_v2",
    "resnet",
    "resnet8",
    "shufflenet",
    "squeezenet",
    "tiny_cnn",
    "transformer_encoder",
    "vgg",
]

"""`resnet50`: the ResNet-50 (v1.5) topology with BatchNorm folded into the convolutions.

Weights are deterministic and He-scaled. The last convolution of every
residual branch is scaled down (as zero-init-gamma training would leave it,
but not zero) so that sixteen residual additions keep activations of order
one instead of growing geometrically.
"""

from __future__ import annotations

import numpy as np
import onnx

from trtpool_builder.examples.graph import FLOAT, GraphBuilder, tensor

STAGES = ((64, 3), (128, 4), (256, 6), (512, 3))  # (bottleneck width, blocks)
EXPANSION = 4
NUM_CLASSES = 1000
RESIDUAL_SCALE = 0.2


class _ResNetWriter:
    def __init__(self, seed: int, image_size: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.image_size = image_size
        self.g = GraphBuilder()

    def conv(
        self,
        x: str,
        name: str,
        c_in: int,
        c_out: int,
        kernel: int,
        stride: int = 1,
        relu: bool = True,
        scale: float = 1.0,
    ) -> str:
        """Conv with folded BatchNorm (weights + bias), optionally followed by ReLU."""
        fan_in = c_in * kernel * kernel
        gain = 2.0 if relu else 1.0
        weight = self.rng.standard_normal((c_out, c_in, kernel, kernel), dtype=np.float32)
        weight *= np.float32(scale * np.sqrt(gain / fan_in))
        bias = (self.rng.standard_normal(c_out, dtype=np.float32) * 0.01).astype(np.float32)
        pad = kernel // 2
        y = self.g.op(
            "Conv",
            [x, self.g.const(f"{name}.weight", weight), self.g.const(f"{name}.bias", bias)],
            f"{name}.Conv",
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
        )
        return self.g.op("Relu", [y], f"{name}.Relu") if relu else y

    def bottleneck(self, x: str, name: str, c_in: int, width: int, stride: int) -> str:
        c_out = width * EXPANSION
        y = self.conv(x, f"{name}.conv1", c_in, width, 1)
        y = self.conv(y, f"{name}.conv2", width, width, 3, stride)
        y = self.conv(y, f"{name}.conv3", width, c_out, 1, relu=False, scale=RESIDUAL_SCALE)
        shortcut = x
        if stride != 1 or c_in != c_out:
            shortcut = self.conv(x, f"{name}.downsample", c_in, c_out, 1, stride, relu=False)
        y = self.g.op("Add", [y, shortcut], f"{name}.Add")
        return self.g.op("Relu", [y], f"{name}.Relu")

    def build(self) -> onnx.ModelProto:
        x = self.conv("input", "stem", 3, 64, 7, 2)
        x = self.g.op("MaxPool", [x], "stem.MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        channels = 64
        for stage, (width, blocks) in enumerate(STAGES, start=1):
            for block in range(blocks):
                stride = 2 if stage > 1 and block == 0 else 1
                x = self.bottleneck(x, f"layer{stage}.{block}", channels, width, stride)
                channels = width * EXPANSION
        x = self.g.op("GlobalAveragePool", [x], "avgpool")
        x = self.g.op("Flatten", [x], "flatten", axis=1)
        fc_weight = self.rng.standard_normal((NUM_CLASSES, channels), dtype=np.float32)
        fc_weight *= np.float32(np.sqrt(1.0 / channels))
        fc_bias = (self.rng.standard_normal(NUM_CLASSES, dtype=np.float32) * 0.01).astype(np.float32)
        self.g.output(
            "Gemm", [x, self.g.const("fc.weight", fc_weight), self.g.const("fc.bias", fc_bias)], "logits", transB=1
        )
        return self.g.model(
            "resnet50",
            [tensor("input", FLOAT, ["batch", 3, self.image_size, self.image_size])],
            [tensor("logits", FLOAT, ["batch", NUM_CLASSES])],
        )


def build_resnet50(seed: int = 0, image_size: int = 224) -> onnx.ModelProto:
    """Input `input` [batch, 3, image_size, image_size]; 64 or 112 make fast CPU runs."""
    if image_size < 32:
        raise ValueError(f"resnet50: image_size {image_size} is below 32, the network's total stride")
    return _ResNetWriter(seed, image_size).build()

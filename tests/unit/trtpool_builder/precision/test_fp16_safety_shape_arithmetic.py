"""fp16 conversion: arithmetic on sizes an exporter casts to float stays in fp32 (issue 19).

The graph mirrors the anchor grid of an ultralytics 8.3.0 YOLOv8 detection head exported with
`YOLO("yolov8n.yaml").export(format="onnx", dynamic=True)` (torch.onnx's TorchScript exporter;
`make_anchors` calls torch.arange(end=w, dtype=float32) + 0.5 on each feature map's size):
Range(0.0, Cast(Gather(Shape(feature), 3), to=float), 1.0), the 0.5 offset, the grid, and the
box distances (activations) it meets. Converted whole, the Cast writes float16 and TensorRT-RTX
1.7 refuses the build: `Input 0's element type (float) differs from input 1's element type
(half)` in the Range's shape computation. bench/yolo_fp16.py runs the real export."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtpool.model.sidecar import read_sidecar
from trtpool_builder.engine.build import BuildOptions, build_engine
from trtpool_builder.installed import is_importable
from trtpool_builder.precision.fp16_safety import shape_arithmetic
from trtpool_builder.precision.tensor_probe import name_nodes


def _axis_centres(axis: int, name: str) -> list[onnx.NodeProto]:
    """torch.arange(end=size, dtype=float32) + 0.5 on `feature`'s axis, as the exporter writes it."""
    return [helper.make_node("Shape", ["feature"], [f"{name}_shape"], name=f"/{name}/Shape"),
            helper.make_node("Gather", [f"{name}_shape", f"axis_{axis}"], [f"{name}_size"], name=f"/{name}/Gather"),
            helper.make_node("Cast", [f"{name}_size"], [f"{name}_limit"], to=TensorProto.FLOAT, name=f"/{name}/Cast"),
            helper.make_node("Range", ["zero", f"{name}_limit", "one"], [f"{name}_range"], name=f"/{name}/Range"),
            helper.make_node("Add", [f"{name}_range", "half"], [name], name=f"/{name}/Add")]


def _anchor_grid_model(path: Path) -> Path:
    """make_anchors for one feature map, then dist2bbox's `anchor_points - lt` on the feature."""
    constants = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
                 (("zero", 0.0), ("one", 1.0), ("half", 0.5))]
    constants += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
                  (("axis_2", 2), ("axis_3", 3), ("column", [-1, 1]), ("row", [1, -1]), ("last", [-1]),
                   ("pairs", [-1, 2]), ("first", [0]), ("flat", [0, 2, -1]))]
    node = helper.make_node
    nodes = [*_axis_centres(3, "sx"), *_axis_centres(2, "sy"),
             # torch.meshgrid(sy, sx, indexing="ij"), torch.stack((sx, sy), -1).view(-1, 2)
             node("Shape", ["sy"], ["sy_len"], name="/meshgrid/Shape"),
             node("Shape", ["sx"], ["sx_len"], name="/meshgrid/Shape_1"),
             node("Concat", ["sy_len", "sx_len"], ["grid_shape"], axis=0, name="/meshgrid/Concat"),
             node("Reshape", ["sy", "column"], ["sy_column"], name="/meshgrid/Reshape"),
             node("Reshape", ["sx", "row"], ["sx_row"], name="/meshgrid/Reshape_1"),
             node("Expand", ["sy_column", "grid_shape"], ["gy"], name="/meshgrid/Expand"),
             node("Expand", ["sx_row", "grid_shape"], ["gx"], name="/meshgrid/Expand_1"),
             node("Unsqueeze", ["gx", "last"], ["gx_1"], name="/stack/Unsqueeze"),
             node("Unsqueeze", ["gy", "last"], ["gy_1"], name="/stack/Unsqueeze_1"),
             node("Concat", ["gx_1", "gy_1"], ["stacked"], axis=-1, name="/stack/Concat"),
             node("Reshape", ["stacked", "pairs"], ["anchors"], name="/anchors/Reshape"),
             node("Transpose", ["anchors"], ["anchors_t"], perm=[1, 0], name="/anchors/Transpose"),
             node("Unsqueeze", ["anchors_t", "first"], ["anchor_points"], name="/anchors/Unsqueeze"),
             # The activations the grid meets: the box distances (lt) of each anchor.
             node("Reshape", ["feature", "flat"], ["lt"], name="/lt/Reshape"),
             node("Sub", ["anchor_points", "lt"], ["boxes"], name="/boxes/Sub")]
    graph = helper.make_graph(
        nodes, "anchor_grid", [helper.make_tensor_value_info("feature", TensorProto.FLOAT, ["batch", 2, "h", "w"])],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["batch", 2, "anchors"])], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def test_the_anchor_grid_is_shape_arithmetic_and_the_activations_are_not(tmp_path: Path) -> None:
    model = onnx.load(_anchor_grid_model(tmp_path / "anchors.onnx"))
    name_nodes(model)
    kept = shape_arithmetic(model)
    grid = [f"/{axis}/{op}" for axis in ("sx", "sy") for op in ("Cast", "Range", "Add")]
    assert set(grid) <= set(kept) and {"/meshgrid/Expand", "/stack/Concat", "/anchors/Unsqueeze"} <= set(kept)
    # fp16 as usual: the activations, and what the grid meets them in; the integer Gather is untouched.
    assert not {"/lt/Reshape", "/boxes/Sub", "/sx/Gather"} & set(kept)


@pytest.mark.skipif(not is_importable("tensorrt_rtx"), reason="tensorrt_rtx is not installed")
def test_fp16_builds_a_yolo_anchor_grid_on_dynamic_sizes(tmp_path: Path) -> None:
    source = _anchor_grid_model(tmp_path / "anchors.onnx")
    options = BuildOptions(trt_module="tensorrt_rtx", precision="fp16",
                           shapes=("feature=1x2x10x10:1x2x40x40:4x2x80x80",))
    result = build_engine(source, tmp_path / "anchors.plan", options)
    # Nothing was kept for its values (the grid is not reported), and the grid is exact.
    assert read_sidecar(result.engine).precision.kept_fp32 == ()
    assert result.accuracy.max_error < 1e-3

"""trtpool-tune's command line (no server): the search space its flags make from the served config,
and the unary front written with a decoupled-front choice."""
from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from trtpool import parameters
from trtpool_builder.folder.model_folder import read_config
from trtpool_ops.tune.cli import build_space, parser, write_front
from trtpool_ops.tune.space import Axis, Candidate, render


def test_instances_is_an_ordered_axis_that_starts_at_the_served_count():
    args = parser().parse_args(["folder", "--modes", "sync", "--contexts", "1", "--instances", "4,1,2",
                                "--queue-delays", "100", "--preferred", "keep"])
    served = {"max_batch_size": 8, "instance_group": [{"kind": "KIND_GPU", "count": 2}]}
    [*_, instances] = build_space(args, served, has_process=False).axes
    assert instances == Axis("instances", ("1", "2", "4"), "2") and instances.ordered
    [*_, alone] = build_space(args, {"max_batch_size": 8}, has_process=False).axes
    assert alone.start == "1"   # Triton's default: one instance


def test_a_decoupled_front_choice_comes_with_its_front(tmp_path):
    base = mc.ModelConfig(name="m", backend="trtpool", max_batch_size=8)
    base.input.add(name="x", data_type=mc.TYPE_FP32, dims=[4])
    base.output.add(name="y", data_type=mc.TYPE_FP32, dims=[2])
    front = write_front(tmp_path, "m", render(base, Candidate("decoupled-front", 2)))
    assert front == tmp_path / "m_unary"
    config = read_config(front)
    assert config.parameters["forward_to"].string_value == "m" and not config.model_transaction_policy.decoupled
    assert [t.name for t in config.input] == ["x"] and [t.name for t in config.output] == ["y"]
    assert not (tmp_path / "m").exists()   # only the front: the model's config is config.tuned.pbtxt


def test_the_engine_host_axis_is_searched_with_the_instance_count_for_sync_candidates():
    args = parser().parse_args(["folder", "--modes", "sync,pipelined", "--contexts", "2", "--instances", "1,4",
                                "--engine-host", "on,off", "--queue-delays", "100", "--preferred", "keep"])
    served = {"max_batch_size": 8, "parameters": {"engine_host": {"string_value": "off"}}}
    space = build_space(args, served, has_process=False)
    host = next(axis for axis in space.axes if axis.name == "engine_host")
    assert host == Axis("engine_host", ("on", "off"), "off") and not host.ordered   # each value tried
    assert {(c.setting("engine_host"), c.setting("instances")) for c in space.grid()} == {
        ("on", "1"), ("on", "4"), ("off", "1"), ("off", "4")}
    base = mc.ModelConfig(name="m", backend="trtpool", max_batch_size=8)
    hosted = render(base, Candidate("sync", 2, (("engine_host", "on"), ("instances", "4"))))
    assert hosted.parameters["engine_host"].string_value == "on" and hosted.instance_group[0].count == 4
    # the host serves sync instances only: a pipelined candidate runs without one (a valid config)
    pipelined = render(base, Candidate("pipelined", 2, (("engine_host", "on"),)))
    assert pipelined.parameters["engine_host"].string_value == "off"
    for config in (hosted, pipelined):
        parameters.load(json_format.MessageToDict(config, preserving_proto_field_name=True), Path("/m/1"), "cpu")

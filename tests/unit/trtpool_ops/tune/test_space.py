"""trtpool-tune's candidates rendered as config.pbtxt: each candidate sets only its own fields,
and what it renders loads in trtpool."""
from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.unit.trtpool_ops.tune.test_search import ELASTIC_4
from trtpool import parameters
from trtpool_ops.tune.space import Candidate, render


def test_the_instances_axis_sets_every_instance_groups_count():
    grouped = mc.ModelConfig(name="m", backend="trtpool")
    grouped.instance_group.add(kind=mc.ModelInstanceGroup.KIND_GPU, count=1, gpus=[0])
    grouped.instance_group.add(kind=mc.ModelInstanceGroup.KIND_GPU, count=2, gpus=[1])
    config = render(grouped, Candidate("sync", 1, (("instances", "4"),)))
    assert [(g.kind, g.count, list(g.gpus)) for g in config.instance_group] == [
        (mc.ModelInstanceGroup.KIND_GPU, 4, [0]), (mc.ModelInstanceGroup.KIND_GPU, 4, [1])]
    assert [g.count for g in grouped.instance_group] == [1, 2]   # the user's config is untouched
    bare = render(mc.ModelConfig(name="m", backend="trtpool"), Candidate("sync", 1, (("instances", "3"),)))
    assert [(g.kind, g.count) for g in bare.instance_group] == [(mc.ModelInstanceGroup.KIND_AUTO, 3)]


def test_render_sets_only_the_candidates_fields():
    base = mc.ModelConfig(name="m", backend="trtpool", max_batch_size=32)
    base.dynamic_batching.preferred_batch_size.extend([8, 32])
    base.dynamic_batching.max_queue_delay_microseconds = 100
    for key, value in {"min_contexts": "1", "max_contexts": "4", "runtime": "auto",
                       "shrink_after_idle_seconds": "300"}.items():
        base.parameters[key].string_value = value
    config = render(base, Candidate("decoupled", 2, (("max_batch_size", "16"), ("queue_delay_us", "500"))))
    assert config.model_transaction_policy.decoupled
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params == {"contexts": "2", "mode": "decoupled", "runtime": "auto", "batch_wait_microseconds": "500"}
    assert config.max_batch_size == 16 and list(config.dynamic_batching.preferred_batch_size) == [8]
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    elastic = render(base, ELASTIC_4)
    assert {k: v.string_value for k, v in elastic.parameters.items() if "contexts" in k or "idle" in k} == {
        "min_contexts": "1", "max_contexts": "4", "shrink_after_idle_seconds": "300"}   # the folder's policy kept
    plain = render(base, Candidate("pipelined", 1, (("preferred_batch_size", "none"),)))
    assert not plain.HasField("model_transaction_policy") and not plain.dynamic_batching.preferred_batch_size
    assert list(base.dynamic_batching.preferred_batch_size) == [8, 32]   # the user's config is untouched


def test_a_decoupled_point_without_queue_delay_waits_the_schedulers_least():
    """Queue delay 0 in decoupled mode: trtpool's scheduler takes a batch wait of 1 us at least (the
    2026-12-04 H200 grid's decoupled points at 0 did not load before this)."""
    base = mc.ModelConfig(name="tiny", backend="trtpool", max_batch_size=8)
    config = render(base, Candidate("decoupled", 1, (("queue_delay_us", "0"),)))
    assert config.dynamic_batching.max_queue_delay_microseconds == 0
    loaded = parameters.load(json_format.MessageToDict(config, preserving_proto_field_name=True),
                              Path("/models/tiny/1"), "cpu")
    assert loaded.batch_wait_us == 1

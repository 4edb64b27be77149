"""The one parameter table (trtpool.parameters.PARAMETERS): the defaults it states are what a model
gets when the key is left out, and postprocess_threads' default is the one load always gave."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from trtpool import parameters
from trtpool.errors import ConfigError
from trtpool.parameters import PARAMETERS, PoolConfig

# Keys whose presence itself changes the config, so that writing the default is not leaving it out.
PRESENCE_MATTERS = {
    "min_contexts": "makes the pool elastic",
    "grow_after_wait_microseconds": "applies to an elastic pool only",
    "shrink_after_idle_seconds": "applies to an elastic pool only",
    "batch_wait_microseconds": "also sets the engine host's wait, 0 when unset",
}


def _load(tmp_path: Path, **values: str) -> PoolConfig:
    return parameters.load({"name": "m", "parameters": {k: {"string_value": v} for k, v in values.items()}},
                            tmp_path, "cpu")


def test_postprocess_threads_left_out_is_one_per_core(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The dataclass said 1 while load gave one per core (stage_threads); load's is what users got,
    so it is the table's default, auto, and the page says so."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(5)))
    assert PARAMETERS["postprocess_threads"].default == "auto"
    assert "one per core" in PARAMETERS["postprocess_threads"].doc
    assert _load(tmp_path).postprocess_threads == 5
    assert _load(tmp_path, postprocess_threads="auto").postprocess_threads == 5
    assert _load(tmp_path, postprocess_threads="").postprocess_threads == 5
    assert _load(tmp_path, postprocess_threads="2").postprocess_threads == 2


@pytest.mark.parametrize("key", sorted(k for k, p in PARAMETERS.items() if p.default and k not in PRESENCE_MATTERS))
def test_writing_the_default_is_leaving_the_key_out(tmp_path: Path, key: str):
    assert _load(tmp_path, **{key: PARAMETERS[key].default}) == _load(tmp_path)


def test_the_elastic_defaults_are_the_tables(tmp_path: Path):
    elastic = _load(tmp_path, max_contexts="4").elastic
    assert elastic == parameters.Elasticity(1, 4, 500, 60.0)
    assert (elastic.min_contexts, elastic.grow_after_wait_us, elastic.shrink_after_idle_s) == tuple(
        PARAMETERS[key].kind.read(key, PARAMETERS[key].default)
        for key in ("min_contexts", "grow_after_wait_microseconds", "shrink_after_idle_seconds"))


def test_the_engine_hosts_wait_is_0_unless_batch_wait_is_given(tmp_path: Path):
    assert (_load(tmp_path).batch_wait_us, _load(tmp_path).host_batch_wait_us) == (500, 0)
    given = _load(tmp_path, batch_wait_microseconds="500")
    assert (given.batch_wait_us, given.host_batch_wait_us) == (500, 500)


@pytest.mark.parametrize("mode", ["pipelined", "decoupled"])
def test_the_engine_host_takes_sync_instances_and_refuses_the_other_modes_by_name(tmp_path: Path, mode: str):
    """Pipelined instances in front of the host were measured slower than sync ones in 4 of 5
    cases (bench/results/h100/engine_host_inflight.json) and were retired."""
    assert _load(tmp_path, engine_host="on").engine_host == "on"
    config = {"name": "m", "model_transaction_policy": {"decoupled": mode == "decoupled"},
              "parameters": {"engine_host": {"string_value": "on"}, "mode": {"string_value": mode}}}
    with pytest.raises(ConfigError, match=f"'engine_host' is 'on' but mode is '{mode}'.*set mode sync"):
        parameters.load(config, tmp_path, "cpu")


def _auto(tmp_path: Path, device: str, groups: list[dict], mode: str = "sync", **values: str) -> str:
    config = {"name": "m", "instance_group": groups,
              "parameters": {k: {"string_value": v} for k, v in {"mode": mode, **values}.items()}}
    return parameters.load(config, tmp_path, device).engine_host


def test_auto_hands_a_tensor_model_with_four_or_more_instances_on_a_gpu_to_its_engine_host(tmp_path: Path):
    """The measured rule (engine_host_on): six thin instances and a host served tensor clients 1.5-2.2x
    the best ordinary arrangement on the H200; a process file's JPEG path and the CPU lost."""
    assert parameters.AUTO_HOST_INSTANCES == 4
    gpu = "KIND_GPU"
    assert _auto(tmp_path, "cuda:0", [{"kind": gpu, "count": 6, "gpus": [0]}]) == "on"
    assert _auto(tmp_path, "cuda:0", [{"kind": gpu, "count": 2, "gpus": [0]}] * 2) == "on"  # groups add up
    assert _auto(tmp_path, "cuda:1", [{"kind": gpu, "count": 4}]) == "on"  # no gpus listed: every GPU
    assert _auto(tmp_path, "cuda:0", [{"kind": gpu, "count": 3, "gpus": [0]}]) == "off"
    assert _auto(tmp_path, "cuda:0", [{"kind": gpu, "count": 6, "gpus": [1]}]) == "off"  # on another GPU
    assert _auto(tmp_path, "cuda:0", [{"kind": gpu, "count": 3, "gpus": [0]},
                                      {"kind": "KIND_CPU", "count": 6}]) == "off"
    assert _auto(tmp_path, "cpu", [{"kind": "KIND_CPU", "count": 8}]) == "off"
    assert _auto(tmp_path, "cuda:0", [{"kind": gpu, "count": 6, "gpus": [0]}], mode="pipelined") == "off"
    assert _auto(tmp_path, "cuda:0", [{"kind": gpu, "count": 6, "gpus": [0]}], engine_host="off") == "off"
    assert _auto(tmp_path, "cuda:0", [{"kind": gpu, "count": 1, "gpus": [0]}], engine_host="on") == "on"
    (tmp_path / "process.py").write_text("")
    assert _auto(tmp_path, "cuda:0", [{"kind": gpu, "count": 6, "gpus": [0]}]) == "off"

"""Every count and time in a config has a ceiling, model_file is a name the system can take,
and an explicit `contexts` is refused before it allocates past the device's free memory.
(test_refused_at_load proves the refusals through a real server.)"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from trtpool import parameters
from trtpool.errors import ConfigError, EngineError
from trtpool.instance import ModelInstance
from trtpool.runtimes import resolve
from trtpool_builder.examples import write_example


def load(version_dir: Path, decoupled: bool = False, **params: str) -> parameters.PoolConfig:
    config = {"name": "tiny", "max_batch_size": 8, "model_transaction_policy": {"decoupled": decoupled},
              "parameters": {k: {"string_value": v} for k, v in params.items()}}
    return parameters.load(config, version_dir, "cpu")


# Parameters are validated before any file is read.
version_dir = Path("/models/tiny/1")


@pytest.mark.parametrize("key, ceiling, decoupled", [
    ("contexts", 64, False),
    ("response_threads", 64, False),
    ("max_queue_size", 65_536, True),
    ("batch_wait_microseconds", 1_000_000, True),
    ("cancel_check_after_microseconds", 1_000_000, True),
    ("metrics_interval_ms", 60_000, False),
])
def test_every_count_and_time_has_a_ceiling(key, ceiling, decoupled):
    mode = "decoupled" if decoupled else "sync"
    accepted = load(version_dir, decoupled, mode=mode, **{key: str(ceiling)})
    assert ceiling in vars(accepted).values()
    for value in (str(ceiling + 1), "99999999999999999999", "1000000000000"):
        with pytest.raises(ConfigError) as refused:
            load(version_dir, decoupled, mode=mode, **{key: value})
        assert str(refused.value) == (f"parameter '{key}': {value} is too large; expected a whole number "
                                      f"from {0 if key in ('cancel_check_after_microseconds', 'metrics_interval_ms', 'batch_wait_microseconds') else 1} "
                                      f"to {ceiling}")


def test_sequence_buckets_have_a_ceiling():
    assert load(version_dir, sequence_buckets="32,1048576").sequence_buckets == (32, 1_048_576)
    with pytest.raises(ConfigError, match=r"parameter 'sequence_buckets': every size in '32,1048577' must be from "
                                          r"1 to 1048576"):
        load(version_dir, sequence_buckets="32,1048577")


@pytest.mark.parametrize("model_file, fragment", [
    ("model\0.onnx", "parameter 'model_file' contains a NUL byte"),
    ("m" * 5000 + ".onnx", "parameter 'model_file' is 5005 characters long; expected a file name inside the model's "
                           "version folder of at most 255 bytes per part and 4096 in all"),
    ("/".join(["d"] * 2100) + "/m.onnx", "parameter 'model_file' is 4206 characters long"),
])
def test_model_file_names_the_system_cannot_take_are_refused(model_file, fragment):
    with pytest.raises(ConfigError) as refused:
        load(version_dir, model_file=model_file)
    assert fragment in str(refused.value)


def test_a_model_file_in_a_symlink_loop_is_refused(tmp_path):
    version_dir = tmp_path / "m" / "1"
    version_dir.mkdir(parents=True)
    (version_dir / "loop.onnx").symlink_to("loop.onnx")
    with pytest.raises(ConfigError) as refused:
        resolve(load(version_dir, model_file="loop.onnx"))
    assert str(refused.value).startswith("parameter 'model_file': 'loop.onnx' cannot be resolved (")
    assert f"name a file inside the model's version folder '{version_dir}'" in str(refused.value)


@pytest.mark.parametrize("files, holds", [
    ((), "the folder is empty"),
    (("resnet.onnx", "labels.txt"), "it holds 'labels.txt', 'resnet.onnx' (rename 'resnet.onnx' to model.onnx, "
                                    "or name it in 'model_file')"),
    (("model.pt",), "it holds 'model.pt'"),
])
def test_a_version_folder_without_a_model_file_names_what_it_holds(tmp_path, files, holds):
    version_dir = tmp_path / "m" / "1"
    version_dir.mkdir(parents=True)
    for name in files:
        (version_dir / name).write_bytes(b"")
    with pytest.raises(EngineError) as refused:
        resolve(load(version_dir))
    assert str(refused.value) == (f"no model file in '{version_dir}': expected model.plan (TensorRT) or model.onnx "
                                  f"(ONNX Runtime, or the torch runtime), or set parameter 'model_file'; {holds}")


@pytest.mark.parametrize("contexts, count", [("2", 2), ("auto", 1)])
def test_contexts_must_fit_in_free_memory(tmp_path, contexts, count):
    """tiny with a profile up to batch 2^30: 16 FP32 in and 4 out per row make 80 GiB a context,
    more than this host has free; refused before any context is made, for auto (whose floor is
    one context) as for an explicit count."""
    write_example("tiny", tmp_path / "model.onnx")
    rows = 2 ** 30
    each = rows * (16 + 4) * 4
    config = {"name": "tiny", "max_batch_size": rows,
              "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
              "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
              "parameters": {"contexts": {"string_value": contexts},
                             "profile": {"string_value": f"INPUT0=1x16:1x16:{rows}x16"}}}
    free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert free < each, "this host could hold such a context"
    with pytest.raises(ConfigError) as refused:
        ModelInstance(config, tmp_path, "cpu")
    message = str(refused.value)
    assert message.startswith(f"parameter 'contexts': {count} contexts of {each:,} bytes each need {count * each:,} bytes, "
                              "but cpu has ")
    assert message.endswith(" free; not even one fits: make the profile's largest shapes smaller")

"""Issue 15, item 6, in-process: what a config may name. Runtimes come from the
built-ins or the `trtpool.runtimes` entry points; model files stay inside the
version folder. (test_refused_at_load proves the same through a real server.)"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.doubles.flaky_runtime import REGISTERED_NAME, FlakyOnnxRuntime
from trtpool import parameters
from trtpool.errors import ConfigError
from trtpool.runtimes import confined, load_runtime, registered_runtime, resolve
from trtpool_builder.examples import write_example
from trtpool_builder.examples.tiny import tiny_reference

DOUBLES = Path(__file__).resolve().parents[1] / "doubles"


def make_cfg(version_dir: Path, **params: str) -> parameters.PoolConfig:
    config = {"name": "tiny", "max_batch_size": 8, "parameters": {k: {"string_value": v} for k, v in params.items()}}
    return parameters.load(config, version_dir, "cpu")


@pytest.fixture
def version_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "repo" / "tiny" / "1"
    folder.mkdir(parents=True)
    write_example("tiny", folder / "model.onnx")
    return folder


def write_distribution(site: Path, entry_points: str) -> None:
    """An installed distribution's metadata, as pip leaves it in site-packages."""
    info = site / "trtpool_plugin_under_test-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: trtpool-plugin-under-test\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[trtpool.runtimes]\n{entry_points}\n")


@pytest.mark.parametrize("value", ["os:system", "tests.doubles.flaky_runtime:FlakyOnnxRuntime", "a b", "-x"])
def test_a_config_cannot_name_code(version_dir, value):
    with pytest.raises(ConfigError, match="parameter 'runtime'.*never code such as module:Class"):
        make_cfg(version_dir, runtime=value)


def test_the_test_doubles_registration_loads_and_serves(version_dir, monkeypatch):
    """tests/doubles is the harness servers' working directory, which the stub has on its path."""
    monkeypatch.syspath_prepend(str(DOUBLES))
    runtime = load_runtime(make_cfg(version_dir, runtime=REGISTERED_NAME))
    try:
        assert type(runtime).__name__ == FlakyOnnxRuntime.__name__  # imported as the stub does: flaky_runtime
        context = runtime.create_context(0)
        x = np.full((2, 16), 0.5, np.float32)
        context.submit({"INPUT0": [x]})
        np.testing.assert_allclose(context.complete()["OUTPUT0"], tiny_reference(x), rtol=1e-5, atol=1e-5)
    finally:
        runtime.close()


def test_an_unregistered_name_lists_what_is_registered(version_dir, tmp_path, monkeypatch):
    write_distribution(tmp_path / "site", "other = trtpool.runtimes.onnxruntime:OnnxRuntime")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(ConfigError, match=r"'nonesuch' is not a built-in runtime .* \(registered: .*other"):
        load_runtime(make_cfg(version_dir, runtime="nonesuch"))


@pytest.mark.parametrize("entry_point, message", [
    ("broken = no_such_module_anywhere:Runtime", "registered as 'no_such_module_anywhere:Runtime', which cannot be "
                                                  "loaded: ModuleNotFoundError"),
    ("broken = os:system", "registered as 'os:system', which is not a trtpool Runtime class"),
])
def test_a_registered_entry_that_is_not_a_runtime_is_refused(tmp_path, monkeypatch, entry_point, message):
    write_distribution(tmp_path / "site", entry_point)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(ConfigError, match=message):
        registered_runtime("broken")


def test_model_file_inside_the_version_folder_is_accepted(version_dir):
    (version_dir / "sub").mkdir()
    (version_dir / "sub" / "alias.onnx").symlink_to(version_dir / "model.onnx")
    assert resolve(make_cfg(version_dir, model_file="sub/../model.onnx")) == ("onnxruntime",
                                                                              version_dir / "sub/../model.onnx")
    assert resolve(make_cfg(version_dir, model_file="sub/alias.onnx"))[1] == version_dir / "sub" / "alias.onnx"


def test_a_symlinked_version_folder_is_its_own_inside(tmp_path, version_dir):
    linked = tmp_path / "linked_version"
    linked.symlink_to(version_dir)
    assert confined(linked, "model.onnx") == linked / "model.onnx"


@pytest.mark.parametrize("model_file, runtime, message", [
    ("/etc/passwd", "auto", "'/etc/passwd' is an absolute path"),
    ("/etc/passwd", "onnxruntime", "'/etc/passwd' is an absolute path"),
    ("../../other/1/model.onnx", "auto", "outside the model's version folder"),
    ("link.onnx", "onnxruntime", "'link.onnx' resolves to .*outside the model's version folder"),
])
def test_model_file_outside_the_version_folder_is_refused(version_dir, tmp_path, model_file, runtime, message):
    (version_dir / "link.onnx").symlink_to(tmp_path / "elsewhere.onnx")
    with pytest.raises(ConfigError, match=message):
        resolve(make_cfg(version_dir, model_file=model_file, runtime=runtime))


def test_a_default_model_file_may_link_out(tmp_path):
    """The default name is the repository's own layout (trtpool-model stages a folder that way), not a
    config's choice: a link there is followed."""
    version_dir = tmp_path / "m" / "1"
    version_dir.mkdir(parents=True)
    write_example("tiny", tmp_path / "outside.onnx")
    (version_dir / "model.onnx").symlink_to(tmp_path / "outside.onnx")
    assert resolve(make_cfg(version_dir)) == ("onnxruntime", version_dir / "model.onnx")

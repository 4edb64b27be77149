"""A process.json that asks for a JPEG decoder this machine lacks: the resnet50_jpeg example is
refused at load (its setup, through trtpool's own load_process_file, before any CUDA work),
naming the package to install, instead of failing each batch of images on the GPU. Triton
hands the backend its config with each instance group's kind; a GPU instance group is given
here as Triton would give it on a GPU machine (this one has none, so tritonserver itself would
make every instance a CPU one, where the decoder is not used)."""
from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import json_format

from tests.harness.pipelines import SMALL_RESNET, as_request, images, set_process_settings
from trtpool.errors import ConfigError
from trtpool.process.file import load_process_file
from trtpool_builder.examples.repo import make_example_folder
from trtpool_builder.folder.model_folder import read_config
from trtpool.vision.device_crops import DECODER_PACKAGES, NVIMGCODEC_BACKENDS, decoder_unavailable

GPU_GROUP = {"name": "resnet50_jpeg", "kind": "KIND_GPU", "count": 1, "gpus": [0]}
CPU_GROUP = {"name": "resnet50_jpeg", "kind": "KIND_CPU", "count": 1}


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Path:
    return make_example_folder(tmp_path_factory.mktemp("decoder") / "repo", "resnet50_jpeg", "onnx",
                               SMALL_RESNET).folder


def _load(folder: Path, decoder: str, group: dict, backends: list[str] | None = None, **parameters: str):
    set_process_settings(folder, decoder=decoder, decoder_backends=backends or [])
    config = json_format.MessageToDict(read_config(folder), preserving_proto_field_name=True)
    config["instance_group"] = [group]
    for key, value in parameters.items():
        config.setdefault("parameters", {})[key] = {"string_value": value}
    return load_process_file(folder / "1", config)


@pytest.mark.parametrize("decoder", sorted(DECODER_PACKAGES))
def test_a_decoder_that_is_not_installed_is_refused_at_load_naming_its_package(example, decoder):
    if decoder_unavailable(decoder) is None:
        pytest.skip(f"decoder '{decoder}' is installed here")
    with pytest.raises(ConfigError) as refused:
        _load(example, decoder, GPU_GROUP)
    message = str(refused.value)
    assert f"""setup(model_config, folder) raised ConfigError: process.json "decoder": JPEG decoder '{decoder}' """ \
           "cannot be used here" in message, message
    assert DECODER_PACKAGES[decoder][1] in message, message  # e.g. pip install nvidia-nvimgcodec-cu12


def test_auto_is_refused_only_when_neither_decoder_imports(example):
    if decoder_unavailable("auto") is None:
        pytest.skip("a JPEG decoder is installed here")
    with pytest.raises(ConfigError) as refused:
        _load(example, "auto", GPU_GROUP)
    assert all(install in str(refused.value) for _, install in DECODER_PACKAGES.values()), refused.value


@pytest.mark.parametrize("group, faces", [(CPU_GROUP, "auto"), (GPU_GROUP, "request")])
def test_a_model_that_decodes_with_pillow_is_not_refused_for_the_gpu_decoder(example, group, faces):
    """CPU instances, or GPU ones told to serve the per-request face: Pillow decodes, so the
    GPU decoder the file names is not needed."""
    process = _load(example, "nvimgcodec", group, process_faces=faces)
    crops = process.preprocess(as_request("IMAGE", images(1)[0]))["input"]
    assert crops.shape == (1, 3, SMALL_RESNET["image_size"], SMALL_RESNET["image_size"])


@pytest.mark.parametrize("decoder, backends, refusal", [
    ("torchvision", ["HW_GPU_ONLY"], "backends ['HW_GPU_ONLY'] are nvImageCodec's: they need decoder 'nvimgcodec', "
                                     "not 'torchvision'"),
    ("auto", ["GPU_ONLY"], "backends ['GPU_ONLY'] are nvImageCodec's: they need decoder 'nvimgcodec', not 'auto'"),
    ("nvimgcodec", ["HW_GPU_ONLY", "NVJPG"], "unknown nvImageCodec backend(s) ['NVJPG']: one or more of GPU_ONLY, "
                                             "HYBRID_CPU_GPU, HW_GPU_ONLY, CPU_ONLY"),
])
def test_decoder_backends_that_cannot_serve_are_refused_at_load_by_name(example, decoder, backends, refusal):
    """process.json's decoder_backends (nvImageCodec's BackendKind names, e.g. HW_GPU_ONLY for the
    hardware JPEG decoder) is checked at load, before the decoder is imported."""
    with pytest.raises(ConfigError) as refused:
        _load(example, decoder, GPU_GROUP, backends)
    assert f'process.json "decoder_backends": {refusal}' in str(refused.value), refused.value


def test_the_nvimgcodec_backend_names_are_nvimgcodecs():
    nvimgcodec = pytest.importorskip("nvidia.nvimgcodec", reason="nvImageCodec is not installed here")
    assert set(NVIMGCODEC_BACKENDS) == {name for name in dir(nvimgcodec.BackendKind) if name.isupper()}

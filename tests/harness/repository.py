"""The model repository the end-to-end tests serve, made with the builder."""
from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from tests.doubles.flaky_runtime import REGISTERED_NAME
from tests.harness.sequence_model import PROFILE as SEQUENCE_PROFILE
from tests.harness.sequence_model import write_sequence_model
from trtpool_builder.engine.build import BuildOptions, build_engine
from trtpool_builder.examples import get_example, write_example
from trtpool_builder.folder.front import make_front_folder
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder, read_config, write_config

FLAKY_RUNTIME = REGISTERED_NAME  # the harness's servers see the test doubles' registration
# Long enough that concurrent clients' requests meet in one batch.
QUEUE_DELAY_US = 20_000


def example_onnx(cache: Path, name: str, **options) -> Path:
    path = cache / f"{name}.onnx"
    if not path.exists():
        write_example(name, path, **options)
    return path


def add_example(repo: Path, cache: Path, name: str, model_name: str | None = None, **serving) -> Path:
    example = get_example(name)
    options = ServingOptions(max_queue_delay_microseconds=QUEUE_DELAY_US, **serving)
    return make_model_folder(repo, model_name or name, example_onnx(cache, name),
                             example.serving_profiles(), options)


def set_parameters(folder: Path, **parameters: str) -> None:
    config = read_config(folder)
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    write_config(folder, config)


def build_test_repository(repo: Path, cache: Path, large_examples: bool = True) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    add_example(repo, cache, "tiny", contexts="2")
    add_example(repo, cache, "tiny", "tiny_flaky", contexts="2", runtime=FLAKY_RUNTIME)
    # Tests count these models' batches exactly: metrics after every batch.
    set_parameters(add_example(repo, cache, "tiny", "tiny_decoupled", contexts="2", mode="decoupled"),
                   metrics_interval_ms="0")
    add_example(repo, cache, "tiny", "tiny_decoupled_flaky", contexts="2", mode="decoupled",
                runtime=FLAKY_RUNTIME)
    make_front_folder(repo, "tiny_decoupled")
    add_example(repo, cache, "tiny", "tiny_pipelined", contexts="2", mode="pipelined")
    add_example(repo, cache, "tiny", "tiny_pipelined_flaky", contexts="2", mode="pipelined", runtime=FLAKY_RUNTIME)
    sequence = cache / "sequence.onnx"
    if not sequence.exists():
        write_sequence_model(sequence)
    for mode in ("sync", "pipelined", "decoupled"):
        make_model_folder(repo, f"sequence_{mode}", sequence, [SEQUENCE_PROFILE],
                          ServingOptions(contexts="2", mode=mode, max_queue_delay_microseconds=QUEUE_DELAY_US))
    # One context and a queue of two: a slow batch makes it overflow.
    set_parameters(add_example(repo, cache, "tiny", "tiny_small_queue", contexts="1", mode="decoupled",
                               runtime=FLAKY_RUNTIME), max_queue_size="2", metrics_interval_ms="0")
    if large_examples:
        add_example(repo, cache, "resnet50", contexts="2")
        add_example(repo, cache, "bert_base", contexts="2")

    # Only `backend: "trtpool"` and the model file: auto-complete fills the rest.
    bare = repo / "tiny_autocomplete"
    (bare / "1").mkdir(parents=True, exist_ok=True)
    (bare / "1" / "model.onnx").write_bytes(example_onnx(cache, "tiny").read_bytes())
    (bare / "config.pbtxt").write_text('backend: "trtpool"\n')
    return repo


def add_broken_models(repo: Path, cache: Path) -> dict[str, str]:
    """Models that must fail to load, with a fragment their error must contain."""
    tiny = example_onnx(cache, "tiny")
    expected = {}

    mismatch = make_model_folder(repo, "bad_dims", tiny, get_example("tiny").serving_profiles())
    config = (mismatch / "config.pbtxt").read_text()
    (mismatch / "config.pbtxt").write_text(config.replace("dims: 16", "dims: 15", 1))
    expected["bad_dims"] = "input 'INPUT0' dims: config.pbtxt says [15], the model has [16]"

    missing = repo / "missing_file"
    (missing / "1").mkdir(parents=True, exist_ok=True)
    (missing / "config.pbtxt").write_text(config.replace('name: "bad_dims"', 'name: "missing_file"'))
    (missing / "1" / "tiny.onnx").write_bytes(tiny.read_bytes())   # the right file, the wrong name
    expected["missing_file"] = "it holds 'tiny.onnx' (rename 'tiny.onnx' to model.onnx, or name it in 'model_file')"

    truncated = make_model_folder(repo, "truncated_onnx", tiny, get_example("tiny").serving_profiles())
    data = (truncated / "1" / "model.onnx").read_bytes()
    (truncated / "1" / "model.onnx").write_bytes(data[: len(data) // 2])
    expected["truncated_onnx"] = "cannot be loaded by ONNX Runtime"

    no_sidecar = make_model_folder(repo, "engine_no_sidecar", tiny, get_example("tiny").serving_profiles())
    (no_sidecar / "1" / "model.onnx").rename(no_sidecar / "1" / "model.plan")
    expected["engine_no_sidecar"] = "has no sidecar 'model.plan.json'"

    typo = make_model_folder(repo, "key_typo", tiny, get_example("tiny").serving_profiles())
    config = read_config(typo)
    config.parameters["contxts"].string_value = "2"
    write_config(typo, config)
    expected["key_typo"] = "unknown parameter(s) ['contxts'] (did you mean 'contexts'?); trtpool accepts ["

    # A real engine (TensorRT-RTX builds without a GPU) served by a CPU instance.
    engine = cache / "tiny.plan"
    if not engine.exists():
        build_engine(tiny, engine, BuildOptions(shapes=get_example("tiny").serving_profiles()))
    # trtpool-model refuses to write this folder (it would not load): a GPU folder, turned to CPU.
    on_cpu = make_model_folder(repo, "engine_on_cpu", engine)
    config = read_config(on_cpu)
    config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    write_config(on_cpu, config)
    expected["engine_on_cpu"] = "engines run on a GPU, but this model instance is on 'cpu'"
    return expected

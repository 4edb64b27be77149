"""Console scripts: trtpool-build, trtpool-model, trtpool-examples, trtpool-accuracy.

Each parses its arguments, calls one library function and turns a
TrtpoolError into one clear line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from trtpool.errors import TrtpoolError
from trtpool.gpu.trt_api import MODULES
from trtpool_builder.graph.profiles import BATCHES
from trtpool_builder.precision.accuracy import DEFAULT_MAX_ERROR
from trtpool_builder.precision.convert import PRECISIONS

# trtpool-accuracy: the candidate cannot be executed on this machine.
EXIT_CANNOT_RUN = 3


def _run(
    prog: str, main: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> int:
    args = parser.parse_args(argv)
    try:
        return main(args)
    except (TrtpoolError, ValueError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trtpool-build",
        description=(
            "Build a TensorRT (or TensorRT-RTX) engine from an ONNX file and write its sidecar "
            "<engine>.json. Options follow trtexec/Polygraphy."
        ),
    )
    p.add_argument("--onnx", type=Path, required=True, help="the fp32 ONNX model")
    p.add_argument("--output", type=Path, required=True, help="the engine file to write (e.g. model.plan)")
    p.add_argument(
        "--shapes",
        action="append",
        default=[],
        metavar="NAME=MIN:OPT:MAX,...",
        help="one optimization profile per use, e.g. input=1x3x224x224:8x3x224x224:32x3x224x224",
    )
    p.add_argument("--trt-module", choices=MODULES, help="default: tensorrt when importable, else tensorrt_rtx")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32")
    p.add_argument(
        "--calib",
        type=Path,
        metavar="DIR_OR_FILE",
        help="sample inputs: .npz named by input, .npy (one input), or a folder. int8/fp8: "
        "calibration; fp16: where values beyond fp16's range are looked for. Also what the "
        "conversion is checked on (default: random inputs at each profile's opt shapes)",
    )
    p.add_argument(
        "--max-error",
        type=float,
        metavar="E",
        help="refuse a converted graph (fp16, int8, fp8) whose outputs differ from the fp32 "
        "model's by a relative RMS error above E (||converted - fp32|| / ||fp32||; integer "
        "outputs: the share of elements that differ); default "
        + ", ".join(f"{k} {v:g}" for k, v in DEFAULT_MAX_ERROR.items()),
    )
    p.add_argument("--workspace", type=int, metavar="MIB", help="workspace memory pool limit in MiB")
    p.add_argument(
        "--timing-cache",
        type=Path,
        metavar="PATH",
        help="timing cache read before and written after the build (TensorRT only)",
    )
    p.add_argument("--opt-level", type=int, metavar="0-5", help="builder optimization level")
    p.add_argument("--version-compatible", action="store_true")
    p.add_argument("--hardware-compatible", action="store_true", help="TensorRT only: Ampere and later")
    p.add_argument(
        "--compute-capability",
        action="append",
        default=[],
        metavar="X.Y",
        help="TensorRT-RTX target (repeatable), e.g. 8.9",
    )
    p.add_argument(
        "--legacy-precision-flags",
        action="store_true",
        help="TensorRT 10.x only: builder flags on a weakly typed network instead of converting the graph",
    )
    p.add_argument("--verbose", action="store_true")
    return p


def _build(args: argparse.Namespace) -> int:
    from trtpool_builder.engine.build import BuildOptions, build_engine

    options = BuildOptions(
        shapes=tuple(args.shapes),
        trt_module=args.trt_module,
        precision=args.precision,
        calib=args.calib,
        workspace=args.workspace,
        timing_cache=args.timing_cache,
        opt_level=args.opt_level,
        version_compatible=args.version_compatible,
        hardware_compatible=args.hardware_compatible,
        compute_capability=tuple(args.compute_capability),
        legacy_precision_flags=args.legacy_precision_flags,
        max_error=args.max_error,
        verbose=args.verbose,
    )
    result = build_engine(args.onnx, args.output, options)
    sidecar = result.sidecar
    print(
        f"built {result.engine} with {sidecar.module} {sidecar.module_version} in {result.seconds:.2f} s "
        f"({sidecar.precision.mode}, {len(sidecar.profiles)} profile(s), targets "
        f"{', '.join(sidecar.target.compute_capabilities)}); sidecar {result.engine}.json"
    )
    if result.accuracy is not None:
        print(
            f"{sidecar.precision.mode} conversion error {result.accuracy.max_error:.3g} "
            f"(--max-error {sidecar.precision.max_error_allowed:g}), measured on ONNX Runtime: the "
            "engine itself cannot run here"
        )
    return 0


def build_main(argv: Sequence[str] | None = None) -> int:
    return _run("trtpool-build", _build, build_parser(), argv)


def model_parser() -> argparse.ArgumentParser:
    from trtpool.parameters import MODES, PARAMETERS, RUNTIMES
    from trtpool_builder.folder.model_folder import INSTANCE_KINDS, ServingOptions

    d = ServingOptions()
    p = argparse.ArgumentParser(
        prog="trtpool-model",
        description=(
            "Write a Triton model folder <repo>/<name>/ (config.pbtxt and 1/model.onnx or 1/model.plan "
            "with its sidecar) for the trtpool backend."
        ),
    )
    p.add_argument("model_file", type=Path, help="an ONNX file, or an engine with its <engine>.json sidecar")
    p.add_argument("--repo", type=Path, required=True, help="the model repository tritonserver serves")
    p.add_argument("--name", required=True, help="the model's name: the folder <repo>/<name>")
    p.add_argument(
        "--shapes",
        action="append",
        default=[],
        metavar="NAME=MIN:OPT:MAX,...",
        help="ONNX only: one optimization profile per use; MIN, OPT and MAX are full shapes (batch "
        "first) with their dimensions joined by 'x', inputs separated by ',', e.g. "
        "x=1x3x320x320:8x3x320x320:32x3x320x320. Needed for dynamic dimensions, except where "
        f"only each input's first dimension is dynamic: then batches {BATCHES[0]} to "
        f"{BATCHES[2]} (opt {BATCHES[1]}; max --max-batch-size where given)",
    )
    p.add_argument(
        "--runtime",
        default=d.runtime,
        help=f"{', '.join(RUNTIMES)}, or a runtime registered in the trtpool.runtimes entry points",
    )
    p.add_argument("--contexts", default=d.contexts, help="a fixed pool of N contexts, or auto")
    p.add_argument(
        "--min-contexts",
        metavar="N",
        help="an elastic pool (instead of --contexts): contexts kept "
        f"when quiet (parameter min_contexts; default {PARAMETERS['min_contexts'].default})",
    )
    p.add_argument(
        "--max-contexts",
        metavar="N",
        help="an elastic pool: contexts at most (parameter max_contexts; default: what --contexts auto sizes)",
    )
    p.add_argument(
        "--memory-fraction",
        default=d.memory_fraction,
        help="share (0, 1] of the device's free memory that --contexts auto may use "
        "(parameter memory_fraction; default %(default)s)",
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        default=d.mode,
        help="sync: one batch in flight per instance; pipelined: execute() starts each batch on a "
        "free context and returns; decoupled: gRPC streaming clients only, trtpool's scheduler "
        "batches (docs/modes.md; default %(default)s)",
    )
    p.add_argument(
        "--unary-front",
        action="store_true",
        help="decoupled mode: also write <name>_unary, which HTTP /infer and unary gRPC clients call",
    )
    p.add_argument(
        "--instance-kind",
        choices=sorted(INSTANCE_KINDS),
        default=d.instance_kind,
        help="the instance_group kind; auto writes none (one instance per GPU, or CPU without one; "
        "default %(default)s)",
    )
    p.add_argument(
        "--max-queue-delay-us",
        type=int,
        default=d.max_queue_delay_microseconds,
        help="batched models: microseconds Triton's dynamic batcher waits to fill a batch "
        "(dynamic_batching.max_queue_delay_microseconds; default %(default)s)",
    )
    p.add_argument(
        "--preferred-batch-sizes",
        type=int,
        nargs="+",
        default=[],
        metavar="N",
        help="batched models: the dynamic batcher's preferred batch sizes (default: each "
        "profile's opt batch and the largest batch)",
    )
    p.add_argument(
        "--max-batch-size",
        type=int,
        metavar="N",
        help="0: serve without a batch axis (one request per run); N: batched, at most N rows. "
        "Default: batched when every input's and output's first dimension is dynamic, the "
        "profiles give the inputs one batch size, and two requests stacked on ONNX Runtime "
        "answer as they do alone",
    )
    p.add_argument(
        "--version",
        type=int,
        default=1,
        help="the version folder to write, <repo>/<name>/<version>/ (default %(default)s)",
    )
    p.add_argument(
        "--process",
        type=Path,
        metavar="FILE.py",
        help="the model's process file (written as <version>/process.py): preprocess(inputs), "
        "postprocess(outputs, inputs), setup(model_config, folder)",
    )
    p.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME:TYPE:DIMS",
        help="with --process defining preprocess: an input clients send, e.g. IMAGE:STRING:1",
    )
    p.add_argument(
        "--output",
        action="append",
        default=[],
        metavar="NAME:TYPE:DIMS",
        help="with --process defining postprocess: an output clients get, e.g. SCORES:FP32:5",
    )
    p.add_argument(
        "--preprocess-threads",
        metavar="N",
        help="with --process: threads running preprocess "
        f"(parameter preprocess_threads; default {PARAMETERS['preprocess_threads'].default}, one per core)",
    )
    p.add_argument(
        "--preprocess-processes",
        metavar="N",
        help="with --process: run preprocess in N worker "
        f"processes (parameter preprocess_processes; default {PARAMETERS['preprocess_processes'].default}, "
        "on the threads)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace <repo>/<name> if it exists (without it, an existing folder is refused: it may be serving)",
    )
    p.add_argument(
        "--with",
        dest="extra_files",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="with --process: a file it reads (labels, vocabulary), placed beside it",
    )
    return p


POOL_PARAMETERS = ("min_contexts", "max_contexts", "preprocess_threads", "preprocess_processes")


def _check_new(args: argparse.Namespace) -> None:
    """Refuse to overwrite a model folder (or its front) unless --replace says so."""
    names = [args.name, *([f"{args.name}_unary"] if args.unary_front else [])]
    existing = [args.repo / name for name in names if (args.repo / name).exists()]
    if existing and not args.replace:
        raise ValueError(
            f"model folder '{existing[0]}' already exists (it may be serving): pass --replace to "
            "replace it, or choose another --name"
        )


def _process_options(args: argparse.Namespace):
    from trtpool_builder.folder.process_folder import ProcessOptions

    if args.process is None:
        if args.input or args.output or args.extra_files or args.preprocess_threads or args.preprocess_processes:
            raise ValueError("--input, --output, --with and --preprocess-* describe a process file: give --process too")
        return None
    return ProcessOptions.parse(args.process, args.input, args.output, args.extra_files)


def _model(args: argparse.Namespace) -> int:
    from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder

    options = ServingOptions(
        runtime=args.runtime,
        contexts=args.contexts,
        memory_fraction=args.memory_fraction,
        mode=args.mode,
        instance_kind=args.instance_kind,
        max_queue_delay_microseconds=args.max_queue_delay_us,
        preferred_batch_sizes=tuple(args.preferred_batch_sizes),
        max_batch_size=args.max_batch_size,
        parameters=tuple((key, str(getattr(args, key))) for key in POOL_PARAMETERS if getattr(args, key) is not None),
    )
    _check_new(args)
    folder = make_model_folder(
        args.repo, args.name, args.model_file, args.shapes, options, args.version, process=_process_options(args)
    )
    print(f"wrote {folder}")
    if args.unary_front:
        from trtpool_builder.folder.front import make_front_folder

        print(f"wrote {make_front_folder(args.repo, args.name)}")
    return 0


def model_main(argv: Sequence[str] | None = None) -> int:
    return _run("trtpool-model", _model, model_parser(), argv)


def examples_parser() -> argparse.ArgumentParser:
    from trtpool_builder.examples import EXAMPLES
    from trtpool_builder.examples.repo import RUNTIMES

    p = argparse.ArgumentParser(
        prog="trtpool-examples",
        description=(
            "Generate the deterministic example models and their model folders. A second run with the "
            "same options does nothing."
        ),
    )
    p.add_argument("--repo", type=Path, required=True)
    p.add_argument(
        "--names",
        nargs="+",
        choices=sorted(EXAMPLES),
        default=[name for name, example in EXAMPLES.items() if example.process is None],
        help="default: the plain examples; the pipeline examples (resnet50_jpeg, bert_text: a "
        "process.py in front of the engine) need trtpool[pipelines] where they are built and served",
    )
    p.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default="auto",
        help="auto: a TensorRT engine when 'tensorrt' imports and a GPU is present, else ONNX",
    )
    p.add_argument("--image-size", type=int, help="resnet50 and resnet50_jpeg input height and width (default 224)")
    return p


def _examples(args: argparse.Namespace) -> int:
    from trtpool_builder.examples import EXAMPLES
    from trtpool_builder.examples.repo import make_example_folder

    for name in args.names:
        takes_size = "image_size" in EXAMPLES[name].options()
        options = {"image_size": args.image_size} if takes_size and args.image_size else {}
        made = make_example_folder(args.repo, name, args.runtime, options)
        state = "generated" if made.regenerated else "up to date"
        print(f"{made.folder}: {state} ({made.runtime})")
    return 0


def examples_main(argv: Sequence[str] | None = None) -> int:
    return _run("trtpool-examples", _examples, examples_parser(), argv)


def accuracy_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trtpool-accuracy",
        description=(
            "Compare a model's outputs with the fp32 ONNX model on ONNX Runtime: max absolute and relative "
            "error per output. The candidate is an engine (run when this machine can), a model folder, or "
            "an ONNX file (e.g. an fp16 or int8 conversion)."
        ),
    )
    p.add_argument("candidate", type=Path, help="engine file, model folder, or ONNX file")
    p.add_argument(
        "--reference", type=Path, help="the fp32 ONNX file (default for an engine: the ONNX file its sidecar names)"
    )
    p.add_argument(
        "--inputs",
        type=Path,
        metavar="DIR_OR_FILE",
        help=".npz/.npy samples (default: random inputs at the first profile's opt shapes)",
    )
    p.add_argument(
        "--shapes",
        default=None,
        metavar="NAME=MIN:OPT:MAX,...",
        help="profile for random inputs of an ONNX model with dynamic dimensions",
    )
    return p


def _accuracy(args: argparse.Namespace) -> int:
    from trtpool_builder.folder.accuracy_run import EngineNotRunnable, run_accuracy

    try:
        report = run_accuracy(args.candidate, args.reference, args.inputs, args.shapes)
    except EngineNotRunnable as exc:
        print(f"trtpool-accuracy: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    print(report.format())
    return 0


def accuracy_main(argv: Sequence[str] | None = None) -> int:
    return _run("trtpool-accuracy", _accuracy, accuracy_parser(), argv)

"""Every command and message README.md and docs/*.md quote, and the test that runs or produces it.

INVENTORY lists each quote (tests/harness/docs.py says what counts as one: bash-block commands,
other fenced blocks, inline code spans with a space or naming a script) with its kind:

- "command": run by the tests named, as quoted where they can (most read the line from the page);
- "message": produced by the tests named, which check its text;
- "text": neither (a config snippet, a formula, a shape, a source line): the note says what it is.

A command or message that cannot run here says why in `not_here` (a GPU, a Docker engine, an
H200, Triton's own aborts), and its tests check what can be checked on this machine. A quote
that is not listed fails the first test below, so a new page cannot quote an untested command."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests.harness.docs import PAGES, ROOT, command_argv, quotes


@dataclass(frozen=True)
class Quote:
    text: str
    kind: str                       # "command", "message" or "text"
    tests: tuple[str, ...] = ()     # "path::function"
    not_here: str = ""              # why it cannot run on this machine
    note: str = ""                  # for "text": what it is


def command(text: str, *tests: str, not_here: str = "") -> Quote:
    return Quote(text, "command", tests, not_here)


def message(text: str, *tests: str, not_here: str = "") -> Quote:
    return Quote(text, "message", tests, not_here)


def text(quote: str, note: str) -> Quote:
    return Quote(quote, "text", note=note)


SERVE = "tests/ops/test_serve_command.py::"
DEAD = "tests/ops/test_dead_stub.py::"
CLI = "tests/unit/trtpool_builder/test_cli.py::"
GRAPHS = "tests/unit/trtpool_builder/engine/test_build_real_graphs.py::"
HERE = "tests/repo/test_docs_commands.py::"
TOOLING = "tests/repo/test_tooling.py::"
TUNE = "tests/ops/test_tune.py::"
TUNE_VAD = "tests/corpus/test_tune.py::test_a_point_refused_for_generated_data_says_why_and_what_to_give"
DEPLOY = "tests/ops/test_deploy_manifests.py::"
LOAD_FAILURES = "tests/e2e/test_bad_input.py::test_models_that_cannot_load_say_why_and_others_serve"
BENCH_HELP = HERE + "test_bench_commands_take_the_quoted_flags"
H200 = HERE + "test_h200_stages_exist"
PIPELINE_CLIENT = SERVE + "test_the_client_line_serve_sh_prints_works_for_a_pipeline_example"
PIPELINE_COMMANDS = ("tests/unit/trtpool_builder/folder/test_process_folder.py::"
                     "test_the_pipeline_commands_the_process_file_page_quotes_run_as_written")
NO_GPU = "needs an NVIDIA GPU (none on the CI machines)"
NO_CLUSTER = "needs a Kubernetes cluster (none here); the manifests it applies are rendered and validated"
ON_H200 = "runs on the H200 only (bench/gpu/h200.sh stages); minutes to hours"
LONG_BENCH = "a benchmark run of minutes, not a test (results in bench/results/)"
TRITON_ABORT = ("tritonserver 2.51 aborting after about 250 s of a soak that cancelled streams (issue 22); "
                "minutes of soak, not a test")
RACE = ("a race inside python_backend, seen once in CI: the named test accepts it but cannot make it "
        "happen at will")
# tests/reliability/test_grpc_error_stream_abort.py asserts the abort, not which of its messages comes.
GRPC_ERROR_ABORT = ("tritonserver 2.51 aborting on triton_grpc_error streams whose clients also cancel "
                    "(issue 37; one signature among several, seen in 1 of 2 such runs)")

INVENTORY = (
    # README.md: the two commands, the set-up; docs/operations.md: trtpool-serve
    command("scripts/serve.sh", SERVE + "test_serve_sh_serves_only_the_examples_in_MODELS"),
    command("scripts/test.sh", "tests/repo/test_setup_script.py::"
            "test_the_readmes_test_command_sets_up_then_runs_pytest_with_its_arguments"),
    command("scripts/test.sh -k decoupled", "tests/repo/test_setup_script.py::"
            "test_the_readmes_test_command_sets_up_then_runs_pytest_with_its_arguments"),
    # CONTRIBUTING.md: the checks scripts/test.sh runs before pytest
    command(".venv/bin/ruff check", TOOLING + "test_the_checks_contributing_quotes_find_nothing"),
    command(".venv/bin/ruff format --check", TOOLING + "test_the_checks_contributing_quotes_find_nothing"),
    command(".venv/bin/mypy", TOOLING + "test_the_checks_contributing_quotes_find_nothing"),
    text("# noqa: BLE001 - the reason", "the form of a blind except's reason, a comment on its line"),
    text("# type: ignore[code]", "the form of a type checker's exception, a comment on its line"),
    command("scripts/setup.sh", "tests/repo/test_setup_script.py::"
            "test_the_readmes_test_command_sets_up_then_runs_pytest_with_its_arguments",
            "tests/repo/test_setup_script.py::test_old_python_is_refused_with_the_fix"),
    command("scripts/install-trtpool.sh", "tests/repo/test_install_recipe.py::test_link_mode_links_the_source_tree",
            "tests/repo/test_install_recipe.py::test_copy_mode_installs_the_backend_as_the_image_does"),
    command(".venv/bin/python scripts/client.py --protocol grpc --url 127.0.0.1:8001 --model resnet50",
            "tests/e2e/test_perf_analyzer.py::test_the_readmes_client_command_answers",
            SERVE + "test_serve_sh_serves_only_the_examples_in_MODELS"),
    command(".triton/bin/perf_analyzer -m tiny -u 127.0.0.1:8001 -i grpc --concurrency-range 4 "
            "--measurement-interval 2000 --stability-percentage 50",
            "tests/e2e/test_perf_analyzer.py::test_the_readmes_perf_analyzer_command_runs"),
    command("scripts/serve.sh --repo /path/to/model_repository",
            SERVE + "test_serve_sh_serves_a_repository_of_ones_own_without_examples"),
    command(".venv/bin/trtpool-serve --repo /path/to/model_repository",
            SERVE + "test_trtpool_serve_finds_the_set_ups_tritonserver_with_none_on_path"),
    command("trtpool-serve --repo=/models --address=0.0.0.0", HERE + "test_the_images_serve_command",
            not_here="the Docker image (no Docker engine here); the image's CMD is checked to be this command"),
    command("--models A B", SERVE + "test_serve_sh_serves_a_repository_of_ones_own_without_examples",
            SERVE + "test_trtpool_serve_finds_the_set_ups_tritonserver_with_none_on_path"),
    command("trtpool-serve --repo R --log-verbose=1 --exit-timeout-secs=10",
            SERVE + "test_failed_models_are_listed_with_their_reason_and_the_others_serve",
            SERVE + "test_command_line_loads_chosen_models_and_passes_flags_through"),
    command("--log FILE", SERVE + "test_failed_models_are_listed_with_their_reason_and_the_others_serve"),
    command("--tritonserver PATH", SERVE + "test_without_any_tritonserver_one_line_says_where_it_looked"),
    message("unrecognized option '--watch-intreval'", SERVE + "test_a_mistyped_flag_shows_the_unrecognized_option_first"),
    command("--watch-metrics-port PORT", DEAD + "test_the_watchdog_reloads_a_model_whose_stub_died_under_load"),
    command("trtpool-health --url HOST:GRPC_PORT [MODEL ...]",
            DEAD + "test_without_the_watchdog_the_model_stays_ready_and_fails_until_reloaded",
            "tests/ops/test_clean_shutdown.py::test_probed_models_let_the_server_stop_cleanly"),
    message("[serve]   engine_on_cpu: FAILED TO LOAD: Internal: TritonModelException: trtpool: tensorrt_rtx engines "
            "run on a GPU, but this model instance is on 'cpu'; use instance_group [{ kind: KIND_GPU }]",
            SERVE + "test_failed_models_are_listed_with_their_reason_and_the_others_serve"),
    command(".triton/bin/tritonserver --model-repository=/path/to/model_repository --model-control-mode=explicit "
            "--load-model='*' --exit-on-error=false --strict-readiness=false --http-address=127.0.0.1 "
            "--grpc-address=127.0.0.1 --metrics-address=127.0.0.1 --http-port=8000 --grpc-port=8001 "
            "--metrics-port=8002", SERVE + "test_the_plain_tritonserver_command_serves"),
    text("tritonclient (HTTP / gRPC / gRPC streaming)", "the architecture diagram"),
    # docs/how-to/write-a-process-file.md: the pipeline examples
    command('MODELS="resnet50_jpeg bert_text" scripts/serve.sh', PIPELINE_CLIENT),
    command(".venv/bin/python scripts/client.py --protocol grpc --url 127.0.0.1:8001 --model resnet50_jpeg "
            "--file model_repository/resnet50_jpeg/sample.jpg", PIPELINE_CLIENT),
    command("import numpy as np", PIPELINE_CLIENT),   # the README's client snippet, run whole
    message("CudaDriverHelper has not been initialized",
            SERVE + "test_trtpool_serve_finds_the_set_ups_tritonserver_with_none_on_path"),
    message("Failed to initialize NVML", SERVE + "test_trtpool_serve_finds_the_set_ups_tritonserver_with_none_on_path",
            SERVE + "test_a_start_that_fails_is_reported_at_once"),
    command("trtpool-serve --help", SERVE + "test_help_describes_every_flag_with_its_default"),
    # docs/how-to/serve-an-onnx-model.md and docs/builder.md: your own ONNX model
    command(".venv/bin/trtpool-build --onnx model.onnx --output model.plan --precision fp16 "
            "--shapes input=1x3x224x224:1x3x224x224:4x3x224x224 --shapes input=8x3x224x224:32x3x224x224:64x3x224x224 "
            "--timing-cache cache.bin", CLI + "test_the_builder_lines_the_docs_quote_run_as_written"),
    command(".venv/bin/trtpool-model model.plan --repo model_repository --name mymodel",
            CLI + "test_the_builder_lines_the_docs_quote_run_as_written"),
    command(".venv/bin/trtpool-model model.onnx --repo model_repository --name mymodel_cpu "
            "--shapes input=1x3x224x224:8x3x224x224:32x3x224x224", CLI + "test_the_builder_lines_the_docs_quote_run_as_written"),
    command(".venv/bin/trtpool-accuracy model.plan --reference model.onnx",
            CLI + "test_the_builder_lines_the_docs_quote_run_as_written",
            not_here=NO_GPU + ": run as written, it exits 3 saying the engine cannot run here"),
    command("trtpool-accuracy model.plan", CLI + "test_the_builder_lines_the_docs_quote_run_as_written",
            CLI + "test_build_then_model_then_accuracy", not_here=NO_GPU + ": its refusal is checked"),
    command("trtpool-accuracy --inputs", CLI + "test_accuracy_of_a_converted_onnx",
            CLI + "test_accuracy_of_a_model_folder_goes_through_trtpool"),
    command("trtpool-model model.onnx --shapes ...", CLI + "test_the_builder_lines_the_docs_quote_run_as_written"),
    command("--max-batch-size 0", "tests/conformance/test_exporter_quirks.py::test_max_batch_size_chooses_for_the_user"),
    command("--precision fp32", "tests/unit/trtpool_builder/engine/test_build.py::test_tiny_engine_and_sidecar"),  # the default
    command('for version in 10.0.1 10.5.0 10.13.3.9 11.4.0.106; do pip download --no-deps -d /tmp/trt-wheels '
            '"tensorrt-cu12-bindings==$version"; done', HERE + "test_the_tensorrt_commands",
            HERE + "test_the_bindings_download_resolves_each_release"),
    command("TRTPOOL_TENSORRT_WHEELS=/tmp/trt-wheels .venv/bin/python -m pytest tests/unit/doubles/test_tensorrt_double.py",
            HERE + "test_the_tensorrt_commands",
            "tests/unit/doubles/test_tensorrt_double.py::test_the_double_of_each_release_has_only_what_its_bindings_have"),
    command("pip install --extra-index-url https://pypi.nvidia.com tensorrt-cu12", HERE + "test_the_tensorrt_commands",
            not_here="NVIDIA's package index and a GPU; the extra it names is checked in pyproject.toml"),
    message("note: kept in fp32: ...", GRAPHS + "test_fp16_keeps_values_beyond_its_range_in_fp32"),
    message("Input 0's element type (float) differs from input 1's element type (half)",
            "tests/unit/trtpool_builder/precision/test_fp16_safety_shape_arithmetic.py::test_fp16_builds_a_yolo_anchor_grid_on_dynamic_sizes",
            not_here="the error the fix avoids (TensorRT-RTX 1.7 on ultralytics' exports, recorded by "
                     "bench/yolo_fp16.py): the test checks that the same graph now builds"),
    message("rows are not independent",
            "tests/conformance/test_exporter_quirks.py::test_a_first_axis_whose_rows_mix_is_not_made_a_batch_axis"),
    message("cannot parse ...: nodes outside the standard ONNX domain ... ai.onnx.ml.ArrayFeatureExtractor",
            GRAPHS + "test_operator_outside_the_standard_domain_is_named"),
    message("input 'x' axis 2: the model runs with size 48 there but ONNX Runtime refuses size 32 (the min of profile 0 ...)",
            GRAPHS + "test_profile_size_the_model_refuses_names_input_and_axis"),
    message("... could not build an engine ... values are not self-consistent",
            "tests/unit/trtpool/gpu/test_trt_api.py::test_a_messages_block_takes_the_threads_messages_from_the_log_and_errors_still_count",
            not_here="TensorRT's own warning on a profile it rejects; the test double's logger gives it, not a real build"),
    message("dimension names changed", GRAPHS + "test_profile_size_the_model_refuses_names_input_and_axis"),
    message("the fp16 conversion ... is not accurate enough ...; node 'X' (Op) is the first whose output ... differs",
            GRAPHS + "test_fp16_conversion_beyond_max_error_is_refused_by_node"),
    message("... would not load in trtpool as written ...; trtpool says: ...",
            "tests/unit/trtpool_builder/folder/test_model_folder.py::test_a_folder_that_would_not_load_is_not_written"),
    command("bench/yolo_fp16.py", BENCH_HELP, not_here="needs ultralytics' exports (not installed in CI); " + LONG_BENCH),
    command("bench/conformance.py", BENCH_HELP,
            "tests/conformance/test_node_suite.py::test_every_onnxruntime_valid_node_case_is_answered_right",
            not_here=LONG_BENCH + "; the suite runs the same cases (tests/conformance/node_suite.py)"),
    text("Range(0, Cast(Shape(x)[3]), 1) + 0.5", "an ONNX expression"),
    text("h0 [layers, 1, hidden]", "a tensor shape"),
    text("dims: [1]", "a config.pbtxt field"),
    text("instance_group [{ count: 6, kind: KIND_GPU }]", "a config.pbtxt field"),
    text("max_batch_size: 64", "a config.pbtxt field"),
    text("mode: sync", "a config.pbtxt parameter, as docs/configuration.md names it"),
    text("--instances 1,2,4", "a trtpool-tune flag (tests/unit/trtpool_ops/tune/test_cli.py parses it)"),
    text("--engine-host on,off", "a trtpool-tune flag (tests/unit/trtpool_ops/tune/test_cli.py parses it)"),
    text("... contexts=N min_contexts=1", "trtpool-tune's progress line for the elastic step"),
    text("gpu_memory_mib: null", "a tune.json field where no GPU reports memory"),
    text("max_contexts: N", "a config.pbtxt parameter as the elastic step writes it"),
    text("min_contexts: 1", "a config.pbtxt parameter as the elastic step writes it"),
    text("OUTPUTS_ON_DEVICE = True", "a process file's top-level setting (tests/unit/trtpool/process/test_stages.py reads it)"),
    text("reshape: { shape: [] }", "a config.pbtxt field"),
    text("onnx.save(..., save_as_external_data=True)", "a Python call that writes external data"),
    text("||converted - fp32|| / ||fp32||", "a formula"),
    text("[2, 3]", "a tensor shape"),
    text("engine_host_code_allowed = True", "a TensorRT runtime setting"),
    # docs/benchmarks.md
    command("bash bench/gpu/h200.sh elastic", H200, not_here=ON_H200),
    command("bash bench/gpu/h200.sh memory-breakdown memory", H200, not_here=ON_H200),
    command("bash bench/gpu/h200.sh host-path-inprocess host-path-served", H200, not_here=ON_H200),
    message("tensor 's' has ONNX type seq(tensor(float)), which is not a tensor: Triton carries tensors only",
            "tests/conformance/test_exporter_quirks.py::test_values_triton_cannot_carry_are_refused_by_name"),
    command("bash bench/gpu/h200.sh ceiling", H200, not_here=ON_H200),
    command("bench/gpu/h200.sh setup", H200, not_here=ON_H200),
    text("--out bench/results/elastic_cpu.json", "the flag that writes a record; its default is ignored "
         "(tests/repo/test_outputs_ignored.py)"),
    command("bench/elastic.py", BENCH_HELP, not_here=LONG_BENCH),
    command("bench/soak.py --duration 600", BENCH_HELP, "tests/reliability/test_soak.py::test_mixed_traffic_gets_every_answer_right",
            not_here="10 minutes; the suite's short soak runs the same tests/harness/soak.py"),
    command("bench/soak.py", BENCH_HELP, "tests/reliability/test_soak.py::test_mixed_traffic_gets_every_answer_right"),
    command("bench/grpc_error_header.py", BENCH_HELP,
            "tests/bench/test_grpc_error_header.py::test_streams_without_the_header_survive_refusals_and_are_counted"),
    command(".venv/bin/trtpool-tune model_repository/tiny --concurrency 4 --modes sync,pipelined --contexts 1,2 --budget 5",
            TUNE + "test_a_tune_writes_its_report_plot_and_a_config_that_serves"),
    message("[tune] next: ...", TUNE + "test_a_tune_writes_its_report_plot_and_a_config_that_serves"),
    text("--model-control-mode explicit", "tritonserver's flag, named in trtpool-tune's next step"),
    message("#3 sync, 2 ctx", TUNE + "test_a_tune_writes_its_report_plot_and_a_config_that_serves"),
    message("the server refused a request: the model rejected the input: ...", TUNE_VAD),
    message("--input-data FILE.json", TUNE_VAD),
    message("inputs without --shape are measured at the model's opt shapes: --shape input:1,576 --shape state:2,1,128",
            TUNE_VAD),
    command("bench/tune.py", BENCH_HELP, not_here=LONG_BENCH),
    # docs/configuration.md and docs/reference/parameters.md
    text("instance_group [{ kind: KIND_GPU, count: 1, gpus: [0, 1] }]", "a config.pbtxt field"),
    command(".venv/bin/python scripts/parameters_page.py",
            "tests/repo/test_docs.py::test_the_parameters_page_is_what_the_table_generates"),
    text("contexts: auto", "a config parameter"),
    text("contexts: 1", "a config parameter"),
    text('backend: "trtpool"', "a config.pbtxt field"),
    message("process.py preprocess() refused input 'IMAGE' element [0]: ...",
            "tests/e2e/test_pipelines.py::test_images_in_labels_out_equal_the_reference_loop"),
    message("input 'VALUES': process.py preprocess() refused it: ValueError: ...",
            "tests/unit/trtpool/process/test_stages.py::test_each_request_is_answered_alone_whatever_its_process_functions_do"),
    # docs/modes.md
    text("Refused.element(input, element, reason)", "process.py's way to refuse a request (trtpool.errors)"),
    message("process.py preprocess() refused input 'TEXT' element [0]: not UTF-8 text (byte 0xff at 0)",
            "tests/e2e/test_pipelines.py::test_text_in_label_out_equals_the_reference_loop"),
    text('parameters { key: "mode"          value: { string_value: "decoupled" } }', "a config.pbtxt example"),
    text("def setup(model_config: dict, folder: Path) -> None: ...   # optional: read labels.txt from `folder`",
         "process.py's interface"),
    command("trtpool-model ... --mode decoupled --unary-front", CLI + "test_decoupled_model_with_its_unary_front"),
    message("elastic pool: context N could not be made",
            "tests/e2e/test_elastic.py::test_a_context_that_cannot_be_made_leaves_the_model_serving"),
    text("preprocess_processes: N", "a config parameter"),
    command("trtpool-model model.onnx --repo R --name N --shapes input=1x3x224x224:8x3x224x224:32x3x224x224 "
            "--process my_process.py --input IMAGE:STRING:1 --output LABELS:STRING:5 --output SCORES:FP32:5 "
            "--with labels.txt --with process.json", PIPELINE_COMMANDS,
            "tests/unit/trtpool_builder/folder/test_process_folder.py::test_the_folder_carries_the_file_its_files_and_the_outside_face"),
    command("trtpool-examples --names resnet50_jpeg bert_text", PIPELINE_COMMANDS,
            "tests/unit/trtpool_builder/examples/test_pipelines.py::"
            "test_each_pipeline_examples_files_are_made_at_full_size_in_bounded_time",
            "tests/e2e/test_pipelines.py::test_images_in_labels_out_equal_the_reference_loop",
            "tests/e2e/test_pipelines.py::test_text_in_label_out_equals_the_reference_loop"),
    # docs/operations.md
    message("triton_python_backend_stub <repo>/<model>/<version>/model.py ...",
            DEAD + "test_without_the_watchdog_the_model_stays_ready_and_fails_until_reloaded"),
    message("Stub process '<instance>' is not healthy.",
            DEAD + "test_without_the_watchdog_the_model_stays_ready_and_fails_until_reloaded"),
    message("is not healthy", DEAD + "test_without_the_watchdog_the_model_stays_ready_and_fails_until_reloaded"),
    message("has no available versions", DEAD + "test_the_watchdog_reloads_a_model_whose_stub_died_under_load"),
    text("// TODO: Implement restart on decoupled", "a line of python_backend's source"),
    command("curl -X POST localhost:8000/v2/repository/models/<model>/unload",
            DEAD + "test_without_the_watchdog_the_model_stays_ready_and_fails_until_reloaded"),
    command("curl -X POST localhost:8000/v2/repository/models/<model>/load",
            DEAD + "test_without_the_watchdog_the_model_stays_ready_and_fails_until_reloaded"),
    command("trtpool-serve --strict --on-dead-stub=exit",
            "tests/ops/test_deploy_manifests.py::test_deployment_gpu_probes_and_draining",
            DEAD + "test_the_watchdog_can_stop_the_server_for_a_supervisor_to_restart",
            SERVE + "test_strict_start_up_stops_on_a_model_that_fails_to_load",
            not_here="in Kubernetes (no cluster here); the rendered Deployment's args are checked"),
    command("deploy/base/build-engines.sh",
            "tests/ops/test_build_engines.py::test_engines_are_built_once_per_gpu_type_and_served_from_the_cache"),
    text("trtpool_probe: true", "the request parameter the probes send (tests/ops/test_probe_stage_failures.py)"),
    text("nvidia.com/gpu: 1", "a Kubernetes resource"),
    text("terminationGracePeriodSeconds: 90", "a Kubernetes field"),
    # docs/reliability.md
    text("# the plugin package's pyproject.toml", "an entry-point example"),
    text('parameters { key: "runtime" value: { string_value: "my_runtime" } }', "a config.pbtxt example"),
    text("triton_grpc_error: true", "a gRPC header (tests/reliability/test_grpc_error_stream_abort.py sends it)"),
    message("[status <CODE>]", "tests/reliability/test_status_relay.py::test_a_code_survives_the_hop"),
    text("dynamic_batching { default_queue_policy { default_timeout_microseconds } }", "a config.pbtxt field"),
    text("[1, 2^59+5, 8]", "a tensor shape"),
    message("ASSERTION FAILED: !byte_buffer->Valid()",
            "tests/reliability/test_mixed_stream_abort.py::test_one_stream_to_a_decoupled_and_a_sync_model_aborts_tritonserver"),
    message("prior > 0", not_here=TRITON_ABORT),
    message("API misuse of type GRPC_CALL_ERROR_TOO_MANY_OPERATIONS", not_here=GRPC_ERROR_ABORT),
    message("ASSERTION FAILED: false", not_here=GRPC_ERROR_ABORT),
    message("terminate called after throwing ... ValueError: array is too big",
            "tests/reliability/test_size_overflow.py::test_a_wrapping_shape_kills_the_stub_before_the_model_sees_it"),
    message("terminate called after throwing an instance of 'boost::interprocess::lock_exception'",
            "tests/ops/test_front_readiness_limit.py::test_a_model_cannot_ask_whether_another_is_ready_while_the_server_starts",
            not_here=RACE),
    # docs/benchmarks.md: the engine host (issue 36) and the lean runtime (issue 37) on the H200
    command("bash bench/gpu/h200.sh engine-host-tensor host-gpu-tests", H200, not_here=ON_H200),
    command("bash bench/gpu/h200.sh host-roundtrip", H200, not_here=ON_H200),
    command("bash bench/gpu/h200.sh lean-runtime", H200, not_here=ON_H200),
    command("bash bench/gpu/h200.sh setup engine-host-jpeg", H200, not_here=ON_H200),
    command("bash bench/gpu/h200.sh stash-gpu setup decoder-hw", H200, not_here=ON_H200),
    command("bash bench/gpu/h200.sh setup host-copies", H200, not_here=ON_H200),
    command("bash bench/gpu/h200.sh setup jpeg-probe", H200, not_here=ON_H200),
    command("bash bench/gpu/h200.sh setup engine-host-sweep", H200, not_here=ON_H200),
    command("bash bench/gpu/h200.sh engine-host-best", H200, not_here=ON_H200),
    command("bash bench/gpu/h200.sh engine-host-high", H200, not_here=ON_H200),
    command("bash bench/gpu/h200.sh engine-host-jpeg-sweep", H200, not_here=ON_H200),
    command("bench/engine_host_record.py", BENCH_HELP,
            "tests/repo/test_engine_host_record.py::test_the_committed_record_is_what_the_script_makes_from_the_runs_it_names"),
    command("bench/jpeg_probe.py", BENCH_HELP, not_here=ON_H200),
    # docs/benchmarks.md: the engine host (issue 36)
    command(".venv/bin/python bench/host_roundtrip.py --out bench/results/host_roundtrip_cpu.json", BENCH_HELP,
            not_here=LONG_BENCH),
    command("bench/engine_host.py --case tiny --host-instances 1,2 --host-contexts 2 --concurrency 4,16 "
            "--interval-ms 2000 --stability 50 --out bench/results/engine_host_cpu.json", BENCH_HELP,
            not_here=LONG_BENCH),
    # docs/reliability.md: the engine host's faults (issue 36)
    command("TRTPOOL_HOST_CYCLES=100 scripts/test.sh tests/e2e/test_engine_host.py -k cycles",
            "tests/e2e/test_engine_host.py::test_load_unload_cycles_leave_nothing",
            not_here="100 cycles take about 7 minutes on 2 cores; the suite runs the same test with 10"),
    message("the engine host of model 'tiny_host' (pid 4242) went away while it held this request (the peer "
            "closed the connection; it was killed by SIGKILL); it is being restarted: retry",
            "tests/e2e/test_engine_host.py::test_a_killed_host_answers_what_it_held_then_serves_again",
            "tests/unit/trtpool/host/test_server.py::test_a_killed_host_fails_what_it_held_then_a_new_one_serves"),
    text('{"op": "error"}', "the host's answer to a bad message (trtpool.host.protocol)"),
    # docs/modes.md: the engine host (issue 36)
    text("engine_host: on", "the parameter that turns the engine host on (docs/configuration.md lists it)"),
    text("engine_host: auto", "the parameter's default, settled by trtpool.parameters (tests/unit/trtpool/test_parameters.py: "
         "test_auto_hands_a_tensor_model_with_four_or_more_instances_on_a_gpu_to_its_engine_host)"),
    text("python -m trtpool.host MODEL DEVICE SERVER_PID",
         "the host's command line, which tests/harness/server.py's host_pids reads in tests/e2e/test_engine_host.py"),
    text("tritonserver -> instance 1..N (check the batch, write its tensors once into shared memory)",
         "a drawing of the request path (trtpool.host's docstring)"),
    # docs/how-to/write-a-process-file.md, docs/benchmarks.md: the batch faces (issue 28)
    command("bash bench/gpu/h200.sh tune-grid-resnet50 tune-search-resnet50", H200, not_here=ON_H200),
    command("bash bench/gpu/h200.sh setup gpu-pipeline-tests pipeline-kernel", H200, not_here=ON_H200),
    text("--grid --grid-together N", "trtpool-tune flags (tests/ops/test_tune.py runs them: "
         "test_a_grid_loaded_side_by_side_measures_every_point_in_fewer_servers)"),
    text("def preprocess_batch(batch: list[dict], device: str) -> list: ...   # each request's engine inputs, "
         "or an exception", "process.py's batch interface"),
    text("preprocess_threads: auto", "a config parameter"),
    message("input 'IMAGE' element [1]: ...",
            "tests/e2e/test_pipelines.py::test_batch_faces_refuse_each_bad_file_alone_and_answer_the_rest"),
    # issue 37: a JPEG decoder refused at load; TensorRT's lean runtime
    command("pip install torchvision",
            "tests/unit/trtpool/vision/test_device_crops.py::test_a_decoder_that_is_not_installed_is_refused_at_load_naming_its_package",
            not_here="installs a package; the test checks that the refusal names it"),
    text("process_faces: request", "a config parameter"),
    command("pip install tensorrt-lean-cu12-libs tensorrt-lean-cu12-bindings",
            "tests/unit/trtpool/runtimes/test_tensorrt_lean.py::test_the_builder_never_takes_the_lean_runtime",
            not_here="downloads from PyPI; scripts/setup.sh installs the same wheels into .triton/tensorrt-lean/site, "
                     "and the test checks that trtpool's install advice names this line"),
    text("import tensorrt", "Python"),
    text("trtpool-build ... --version-compatible", "a trtpool-build flag"),
    text("bench/lean_runtime.py", "the H200 check of the load path (bench/gpu/h200.sh lean-runtime)"),
    # docs/how-to/: choose a mode, add a runtime, deploy on Kubernetes
    text("mode: pipelined", "a config.pbtxt parameter, as docs/configuration.md names it"),
    text("mode: decoupled", "a config.pbtxt parameter, as docs/configuration.md names it"),
    text("Runtime(cfg, path)", "how trtpool.runtimes makes a registered runtime (tests/reliability/"
         "test_config_confinement.py loads the test doubles' registration)"),
    text("--runtime my_runtime", "trtpool-model's flag for a registered runtime (the harness writes its flaky-runtime "
         "folders through the same option: tests/harness/repository.py)"),
    command("kubectl kustomize", DEPLOY + "test_builtin_kinds_match_the_kubernetes_schemas"),
    command("kubectl apply -k deploy/base", DEPLOY + "test_builtin_kinds_match_the_kubernetes_schemas",
            not_here=NO_CLUSTER),
    command("kubectl create namespace trtpool-h100 && kubectl apply -k deploy/overlays/h100",
            DEPLOY + "test_overlay_pins_a_gpu_type_in_its_own_namespace", not_here=NO_CLUSTER),
    # CONTRIBUTING.md
    command("bash bench/gpu/h200.sh setup tests", H200, not_here=ON_H200),
    text("bench/record.py", "the module that writes a record's command, machine and date (bench/record.py's "
         "default_out: tests/repo/test_outputs_ignored.py)"),
    # docs/architecture.md
    command(".venv/bin/python scripts/import_layers.py --write",
            "tests/repo/test_import_layers.py::test_the_architecture_page_draws_what_the_code_imports"),
    text("flowchart BT", "the Mermaid pictures scripts/import_layers.py draws (their first line)"),
    # docs/design/
    text("trtexec --infStreams=N", "TensorRT's own benchmark tool, cited for how it shares a profile across contexts"),
    text("shape == 0", "an expression inside onnx2torch's converted Reshape, quoted to say where it runs"),
    # docs/reference/errors.md: at load
    message("unknown parameter(s) ['contxts'] (did you mean 'contexts'?); trtpool accepts [...]", LOAD_FAILURES),
    message("parameter 'mode': 'async' is not accepted; expected one of sync, pipelined, decoupled",
            "tests/unit/trtpool/engine/test_batching.py::test_config_errors_name_parameter_and_accepted_values"),
    message("input 'INPUT0' dims: config.pbtxt says [15], the model has [16]", LOAD_FAILURES),
    message("no model file in '...': expected model.plan (TensorRT) or model.onnx (ONNX Runtime, or the torch "
            "runtime), or set parameter 'model_file'; it holds 'tiny.onnx' (rename 'tiny.onnx' to model.onnx, or "
            "name it in 'model_file')", LOAD_FAILURES,
            "tests/unit/trtpool/test_parameters_bounds.py::test_a_version_folder_without_a_model_file_names_what_it_holds"),
    message("ONNX file '...' cannot be loaded by ONNX Runtime: ...", LOAD_FAILURES),
    message("engine '...' has no sidecar 'model.plan.json' next to it; ...", LOAD_FAILURES,
            "tests/unit/trtpool/runtimes/test_tensorrt.py::test_missing_sidecar_is_an_engine_error"),
    message("engine '...' cannot run here: ...",
            "tests/unit/trtpool/runtimes/test_tensorrt.py::test_incompatible_sidecar_is_refused_before_deserializing"),
    message("tensorrt_rtx engines run on a GPU, but this model instance is on 'cpu'; use instance_group "
            "[{ kind: KIND_GPU }]", LOAD_FAILURES),
    message("engine '...' (N bytes) cannot be deserialized by ...",
            "tests/unit/trtpool/runtimes/test_tensorrt_real_module.py::test_real_deserialization_refusal_carries_tensorrt_rtx_words"),
    message("engine '...' is not version-compatible, and ...",
            "tests/unit/trtpool/runtimes/test_tensorrt_lean.py::test_an_engine_that_is_not_version_compatible_is_refused_naming_the_fix"),
    message("parameter 'contexts': N contexts of ... bytes each need ... bytes, but ... has ... free; ...",
            "tests/unit/trtpool/test_parameters_bounds.py::test_contexts_must_fit_in_free_memory"),
    message("parameter 'runtime': 'nonesuch' is not a built-in runtime (...) and no installed package registers it "
            "in the entry point group 'trtpool.runtimes' (registered: ...)",
            "tests/reliability/test_config_confinement.py::test_an_unregistered_name_lists_what_is_registered"),
    message("the Python backend stub mishandles numpy arrays in this serving environment (...)",
            "tests/e2e/test_serving_environment.py::test_a_numpy2_stub_refuses_to_load_with_the_cause"),
    message(".../process.py: defines none of preprocess(inputs), postprocess(outputs, inputs), "
            "preprocess_batch(batch, device), postprocess_batch(outputs, batch); define at least one, or remove "
            "the file", "tests/unit/trtpool/process/test_stages.py::test_a_broken_process_file_stops_the_model_loading_with_the_reason"),
    # docs/reference/errors.md: per request
    message("input 'input_ids': shape [1, 600] is outside the model's optimization profiles; expected a shape "
            "within ...", "tests/e2e/test_bad_input.py::test_dimension_outside_the_profile_names_input_and_range"),
    message("the model rejected the input: ...", TUNE_VAD),
    message("overloaded: ... requests are waiting (max_queue_size ...); retry later",
            "tests/e2e/test_decoupled.py::test_queue_overflow_gets_an_overloaded_error"),
    message("request cancelled before it ran",
            "tests/unit/trtpool/modes/test_decoupled.py::test_only_requests_that_waited_are_asked_about_cancellation"),
    message("model '...' (this front's forward_to target) sent no answer within ... s",
            "tests/reliability/test_front_dead_target.py::"
            "test_a_front_gives_up_on_a_dead_target_serves_again_once_it_is_reloaded_and_holds_no_stop"),
    message("a preprocess worker process died while this request was in its pool (...); the pool was started "
            "again: retry", "tests/unit/trtpool/process/test_stages.py::test_preprocess_in_worker_processes_answers_as_on_threads"),
    message("process.py postprocess() raised RuntimeError: ...",
            "tests/unit/trtpool/process/test_stages.py::test_each_request_is_answered_alone_whatever_its_process_functions_do"),
)
BY_TEXT = {quote.text: quote for quote in INVENTORY}


def test_every_quote_of_the_docs_is_in_the_inventory():
    missing = sorted({(str(page.relative_to(ROOT)), q) for page in PAGES for q in quotes(page) if q not in BY_TEXT})
    assert not missing, "quoted but not in INVENTORY (add it with the test that runs it): " + \
        "\n".join(f"{page}: {q}" for page, q in missing)


def test_every_inventory_entry_is_still_quoted():
    quoted = {q for page in PAGES for q in quotes(page)}
    assert len(BY_TEXT) == len(INVENTORY), "an entry is listed twice"
    assert not [q.text for q in INVENTORY if q.text not in quoted]


def test_each_entry_says_how_it_is_exercised():
    for quote in INVENTORY:
        assert quote.kind in ("command", "message", "text"), quote
        if quote.kind == "text":
            assert quote.note and not quote.tests, quote
        else:
            assert quote.tests or quote.not_here, f"{quote.text!r}: no test and no reason"


@pytest.mark.parametrize("test", sorted({t for q in INVENTORY for t in q.tests}))
def test_the_named_tests_exist(test):
    path, _, function = test.partition("::")
    assert re.search(rf"^def {function}\(", (ROOT / path).read_text(), re.M), f"{test} does not exist"


# --- what can be checked here of the commands that cannot run here --------------------------------


def test_bench_commands_take_the_quoted_flags():
    """Each benchmark script the docs quote starts (--help) and knows every flag quoted with it."""
    scripts: dict[str, set[str]] = {}
    for quote in INVENTORY:
        if quote.kind == "command" and re.match(r"bench/\w+\.py", quote.text):
            script, *args = quote.text.split()
            scripts.setdefault(script, set()).update(a for a in args if a.startswith("--"))
    for script, flags in sorted(scripts.items()):
        done = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{script} --help: {done.stderr}"
        # Only argparse's option lines: the script's docstring, printed above them, quotes the flags too.
        assert not [flag for flag in flags if not re.search(rf"^\s+(-\w, )?{re.escape(flag)}\b", done.stdout, re.M)], \
            (script, done.stdout)


def test_h200_stages_exist():
    script = (ROOT / "bench" / "gpu" / "h200.sh").read_text()
    stages = set(re.findall(r"^    ([a-z0-9-]+)\)", script, re.M))
    for quote in INVENTORY:
        if "bench/gpu/h200.sh" in quote.text:
            wanted = quote.text.split("bench/gpu/h200.sh", 1)[1].split()
            assert wanted and set(wanted) <= stages, (quote.text, sorted(stages))
    assert subprocess.run(["bash", "-n", str(ROOT / "bench" / "gpu" / "h200.sh")]).returncode == 0


def test_the_images_serve_command():
    """The README's command for the Docker image is the image's CMD (which adds --on-dead-stub=exit),
    and trtpool-serve's parser takes it."""
    from trtpool_ops.serve import parser

    [cmd] = re.findall(r"^CMD (\[.*\])$", (ROOT / "docker" / "Dockerfile").read_text(), re.M)
    image = json.loads(cmd)
    readme = command_argv(BY_TEXT["trtpool-serve --repo=/models --address=0.0.0.0"].text)
    assert image[: len(readme)] == readme
    options, unknown = parser().parse_known_args(image[1:])
    assert not unknown and options.address == "0.0.0.0"


def test_the_tensorrt_commands():
    """The releases the pip download line names are ones set-up downloads and scripts/test.sh hands to
    tests/unit/doubles/test_tensorrt_double.py; the pip install line's package is the `tensorrt` extra's."""
    releases = [line for line in (ROOT / "tests" / "doubles" / "tensorrt_releases.txt").read_text().splitlines()
                if line and not line.startswith("#")]
    assert set(_download_line().split(";")[0].split()[3:]) <= set(releases)
    assert "TRTPOOL_TENSORRT_WHEELS=${TRTPOOL_TENSORRT_WHEELS:-$ROOT/.triton/tensorrt-bindings}" in \
        (ROOT / "scripts" / "test.sh").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'tensorrt = ["tensorrt-cu12' in pyproject and "--extra-index-url https://pypi.nvidia.com" in pyproject


def _download_line() -> str:
    return next(q.text for q in INVENTORY if "pip download" in q.text)


def test_the_bindings_download_resolves_each_release(tmp_path):
    """docs/builder.md's download of several tensorrt-cu12-bindings releases, run as written by bash, with
    pip pointed at the wheels set-up downloaded instead of PyPI (same resolver, no network): every
    release arrives. One pip command naming several versions of the package ends in ResolutionImpossible."""
    wheels = ROOT / ".triton" / "tensorrt-bindings"
    line = _download_line()
    versions = line.split(";")[0].split()[3:]
    if not all(list(wheels.glob(f"tensorrt_cu12_bindings-{v}-*.whl")) for v in versions):
        pytest.skip(f"scripts/setup.sh has not downloaded the releases {versions} into {wheels}")
    offline = f"{sys.executable} -m pip download --no-index --find-links {wheels}"
    script = line.replace("pip download", offline).replace("/tmp/trt-wheels", str(tmp_path))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name.split("-")[1] for p in tmp_path.glob("*.whl")) == sorted(versions)

"""The model repository of the reliability suite and the soak benchmark.

    tiny_dec         the report's repro: trtpool-model tiny --shapes INPUT0=1x16:8x16:64x16
                     --mode decoupled --contexts 2
    tiny_dec_unary   its unary front
    tiny_sync        the same model and profile, sync mode
    tiny_pipe        pipelined mode
    seq_dec          the sequence model (tests/harness/sequence_model.py: dynamic length), decoupled,
                     2 contexts
    kill_dec         the flaky double, decoupled, 2 contexts: KILL ends a worker thread mid-run
    kill_submit_dec  the flaky double, decoupled, 1 context: KILL_AT_SUBMIT ends a worker
                     thread while it submits a batch
"""
from __future__ import annotations

from pathlib import Path

from tests.harness.repository import FLAKY_RUNTIME, example_onnx
from tests.harness.sequence_model import PROFILE as SEQUENCE_PROFILE
from tests.harness.sequence_model import write_sequence_model
from trtpool_builder.folder.front import make_front_folder
from trtpool_builder.folder.model_folder import ServingOptions, make_model_folder

TINY_PROFILE = "INPUT0=1x16:8x16:64x16"
# Variables by which ONNX Runtime (and other tools) recognise a CI system and keep
# their telemetry quiet (seen: CI=true); the reliability server runs without them.
CI_MARKERS = ("CI", "CONTINUOUS_INTEGRATION", "BUILD_NUMBER", "RUN_ID", "GITHUB_ACTIONS", "TF_BUILD",
              "GITLAB_CI", "JENKINS_URL", "TRAVIS")
MODELS = ("tiny_dec", "tiny_dec_unary", "tiny_sync", "tiny_pipe", "seq_dec", "kill_dec", "kill_submit_dec")


def build_reliability_repository(repo: Path, cache: Path) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    tiny = example_onnx(cache, "tiny")
    sequence = cache / "sequence.onnx"
    if not sequence.exists():
        write_sequence_model(sequence)
    for name, mode in (("tiny_dec", "decoupled"), ("tiny_sync", "sync"), ("tiny_pipe", "pipelined")):
        make_model_folder(repo, name, tiny, [TINY_PROFILE], ServingOptions(mode=mode, contexts="2"))
    make_front_folder(repo, "tiny_dec")
    make_model_folder(repo, "seq_dec", sequence, [SEQUENCE_PROFILE], ServingOptions(mode="decoupled", contexts="2"))
    for name, contexts in (("kill_dec", "2"), ("kill_submit_dec", "1")):
        make_model_folder(repo, name, tiny, [TINY_PROFILE],
                          ServingOptions(mode="decoupled", contexts=contexts, runtime=FLAKY_RUNTIME))
    return repo

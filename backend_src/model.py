"""trtpool's Triton entry point: thin glue between Triton and trtpool.

Triton finds this file as <backend-dir>/trtpool/model.py when a model's
config.pbtxt says backend: "trtpool"; model folders carry no model.py.
"""

import json
import logging
import os
from pathlib import Path

import triton_python_backend_utils as pb_utils

from trtpool import parameters
from trtpool.errors import TrtpoolError
from trtpool.host.client import HostClient
from trtpool.host.launch import Launcher
from trtpool.instance import ModelInstance, describe
from trtpool.model.config_pbtxt import auto_complete
from trtpool.modes.decoupled import DecoupledHandler
from trtpool.modes.front import ForwardHandler, check_front, forward_timeout_s
from trtpool.modes.hosted import HostHandler
from trtpool.modes.pipelined import PipelinedHandler
from trtpool.modes.sync import SyncHandler
from trtpool.parameters import engine_host_on, instance_device, parameters_of
from trtpool.process.file import engine_sections
from trtpool.triton.metrics import PoolMetrics
from trtpool.triton.status_relay import tagging, untagging
from trtpool.triton.stub_check import check_numpy_handover

# ONNX Runtime (1.29 and later) starts telemetry in every process that creates a
# session unless this is set before its first session (it is imported only when
# a runtime loads): a device id and an event store under $XDG_CACHE_HOME or
# $HOME/.cache (Microsoft/DeveloperTools/.onnxruntime), and uploads. A server's
# stubs write nothing there; an operator who wants it sets ORT_DISABLE_TELEMETRY=0.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


class _TritonLogHandler(logging.Handler):
    """Route the trtpool logger into Triton's log, each record at its own level."""

    def emit(self, record: logging.LogRecord) -> None:
        pb_utils.Logger.log(self.format(record), _triton_level(record.levelno))


def _triton_level(levelno: int):
    if levelno >= logging.ERROR:
        return pb_utils.Logger.ERROR
    if levelno >= logging.WARNING:
        return pb_utils.Logger.WARNING
    return pb_utils.Logger.INFO if levelno >= logging.INFO else pb_utils.Logger.VERBOSE


def _refusal(exc: TrtpoolError):
    return pb_utils.TritonModelException(f"trtpool: {exc}")


def _auto_complete(auto_complete_model_config):
    config = auto_complete_model_config.as_dict()
    if "forward_to" in parameters_of(config):
        return auto_complete_model_config  # a front declares its target's I/O
    version_dir = Path(pb_utils.get_model_dir())  # auto_complete_config gets no path: the stub knows it
    added = auto_complete(config, describe(config, version_dir), engine_sections(version_dir))
    if "max_batch_size" in added:
        auto_complete_model_config.set_max_batch_size(added["max_batch_size"])
    if "dynamic_batching" in added:
        auto_complete_model_config.set_dynamic_batching()
    for section, add in (
        ("input", auto_complete_model_config.add_input),
        ("output", auto_complete_model_config.add_output),
    ):
        for entry in added.get(section, []):
            add({key: value for key, value in entry.items() if key != "reshape"})
            if "reshape" in entry:  # a per-row scalar; add_input/add_output take no reshape,
                # but as_dict() is the config they fill (triton_python_backend_utils, 2.51)
                filled = {e["name"]: e for e in auto_complete_model_config.as_dict()[section]}
                filled[entry["name"]]["reshape"] = entry["reshape"]
    return auto_complete_model_config


class TritonPythonModel:
    # trtpool's own refusals are raised again from these entry points, so that the load error
    # Triton reports ends at the refusal: the Python backend appends the frames from where an
    # exception was raised up to the entry point ("At: ..."), here the entry point's line alone.
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        try:
            return _auto_complete(auto_complete_model_config)
        except TrtpoolError as exc:
            raise _refusal(exc) from None

    def initialize(self, args):
        try:
            self._initialize(args)
        except TrtpoolError as exc:
            raise _refusal(exc) from None

    def _initialize(self, args):
        logger = logging.getLogger("trtpool")
        if not logger.handlers:
            logger.addHandler(_TritonLogHandler())
            logger.setLevel(logging.INFO)
        model_config = json.loads(args["model_config"])
        self.instance = None
        self.host_client = None
        self.metrics = None
        check_numpy_handover(pb_utils)
        if "forward_to" in parameters_of(model_config):
            target = check_front(model_config, Path(args["model_repository"]))
            # Errors from the target come back over BLS without their status code: status_relay.
            self.handler = ForwardHandler(
                untagging(pb_utils),
                target,
                [o["name"] for o in model_config["output"]],
                forward_timeout_s(model_config),
            )
            return
        device = instance_device(args["model_instance_kind"], args["model_instance_device_id"])
        version_dir = Path(args["model_repository"]) / args["model_version"]
        self.metrics = PoolMetrics(pb_utils.MetricFamily, model_config["name"])
        cfg = parameters.load(model_config, version_dir, device)
        if engine_host_on(cfg):  # a thin instance: the model lives in its engine host (trtpool.host)
            client = HostClient(
                Launcher(
                    {
                        "model_config": model_config,
                        "version_dir": str(version_dir),
                        "device": device,
                        "server_pid": os.getppid(),
                    }
                )
            )
            client.attach()
            self.host_client = client
            self.metrics.start_hosted(client.stats, cfg.metrics_interval_ms, client.counts)
            self.handler = HostHandler(pb_utils, client, self.metrics)
            return
        self.instance = ModelInstance(
            model_config, version_dir, device, self.metrics.record_batch, self.metrics.record_stage
        )
        self.metrics.start(self.instance.pool.stats, self.instance.cfg.metrics_interval_ms)
        mode = self.instance.cfg.mode
        if mode == "decoupled":  # a front may forward to it: its errors name their status code
            self.handler = DecoupledHandler(tagging(pb_utils), self.instance, self.metrics)
        else:
            self.handler = {"sync": SyncHandler, "pipelined": PipelinedHandler}[mode](
                pb_utils, self.instance, self.metrics
            )

    def execute(self, requests):
        # The sync handler returns the responses; the forward handler a coroutine,
        # which the stub runs to the end; the pipelined and decoupled handlers
        # return None and answer through the requests' response senders.
        return self.handler(requests)

    def finalize(self):
        self.handler.close()
        if self.metrics:
            self.metrics.close()
        if self.instance:
            self.instance.close()
        if self.host_client:
            self.host_client.close()

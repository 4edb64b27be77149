"""Liveness probes (trtpool-serve's watchdog, trtpool-health): requests marked with the request
parameter PROBE_PARAMETER.

A probe sends zeros (an empty string for a TYPE_STRING input): no input a model's preprocess()
accepts (it is no JPEG), so on a model with a process file each probe would be a refused request
and count in trtpool_stage_failures_total every watch interval. Such a model answers a probe at
once with no outputs and runs no user code: the answer proves what a probe asks, that the model's
stub is alive and answering. Models without a process file run a probe as any request; a unary
front forwards a probe as a probe.
"""

from __future__ import annotations

import json

from trtpool.triton.pb_api import InferenceRequest

PROBE_PARAMETER = "trtpool_probe"
PROBE_MARK = {PROBE_PARAMETER: True}  # a probe's request parameters


def is_probe(request: InferenceRequest) -> bool:
    """Whether a Triton request carries PROBE_PARAMETER set to true."""
    try:
        return json.loads(request.parameters() or "{}").get(PROBE_PARAMETER) is True
    except (ValueError, AttributeError):
        return False

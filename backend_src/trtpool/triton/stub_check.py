"""A start-up check that the Python backend's stub hands numpy arrays over intact.

tritonserver 2.51's stub reads numpy 2 arrays wrongly: request tensors arrive
as zeros and response tensors go out empty, with no error anywhere (seen on
the H200 image, whose environment has numpy 2.5.2). Refusing to load with the
cause named beats serving zeros. The sample takes the same path as a request
tensor: the stub wraps memory handed to it (here by its own DLPack capsule) in
a new numpy array.
"""

from __future__ import annotations

import numpy as np

from trtpool.errors import ConfigError
from trtpool.triton.pb_api import PbUtils

SAMPLE = np.array([1.5, -2.0, 3.25, 4096.0], dtype=np.float32)


def check_numpy_handover(pb_utils: PbUtils) -> None:
    """Raise ConfigError unless the stub returns SAMPLE's values unchanged."""
    try:
        capsule = pb_utils.Tensor("trtpool_stub_check", SAMPLE).to_dlpack()
        returned = np.asarray(pb_utils.Tensor.from_dlpack("trtpool_stub_check", capsule).as_numpy())
    except Exception as exc:  # noqa: BLE001 - any failure is the fault the ConfigError names
        fault = f"taking {SAMPLE.tolist()} failed with {type(exc).__name__}: {exc}"
    else:
        if returned.shape == SAMPLE.shape and np.array_equal(returned, SAMPLE):
            return
        fault = f"{SAMPLE.tolist()} came back as {returned.ravel().tolist()[:8]}"
    raise ConfigError(
        f"the Python backend stub mishandles numpy arrays in this serving environment ({fault}; "
        f"numpy {np.__version__} from {np.__file__}). tritonserver 2.51's stub needs numpy<2: "
        "install numpy 1.26.4 in the environment that starts tritonserver (scripts/setup.sh does)"
    )

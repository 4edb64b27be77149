"""config.pbtxt against the model: fill what is missing, refuse what disagrees."""

from __future__ import annotations

from typing import Any

from trtpool.errors import ConfigError
from trtpool.model.signature import Signature, TensorSpec

DEFAULT_ONNX_MAX_BATCH = 16
# The sections config.pbtxt shares with the model: the engine sections, unless a process file
# stands in front of one (its preprocess before the inputs, its postprocess after the outputs).
SECTIONS = ("input", "output")


def model_dims(spec: TensorSpec, batched: bool) -> list[int]:
    """The tensor's dimensions per request as the model sees them (no batch axis)."""
    return list(spec.shape[1:] if batched else spec.shape)


def config_dims(spec: TensorSpec, batched: bool) -> list[int]:
    """`dims` as config.pbtxt can say them. Triton takes no dimension of 0 (an empty
    dimension is declared -1; trtpool checks the 0 itself) and no empty dims: a scalar
    is declared [1], reshaped to [] by Triton in a batched model (`reshape`) and by
    trtpool in one without a batch axis, where Triton refuses an empty reshape."""
    return [-1 if d == 0 else d for d in model_dims(spec, batched)] or [1]


def tensor_entry(spec: TensorSpec, batched: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": spec.name, "data_type": spec.triton_dtype, "dims": config_dims(spec, batched)}
    if batched and not model_dims(spec, batched):
        entry["reshape"] = {"shape": []}
    return entry


def completion(signature: Signature) -> dict[str, Any]:
    """max_batch_size, inputs and outputs as auto_complete_config adds them."""
    batched = signature.batched
    return {
        "max_batch_size": signature.max_batch_size,
        "input": [tensor_entry(s, batched) for s in signature.inputs],
        "output": [tensor_entry(s, batched) for s in signature.outputs],
    }


def auto_complete(
    model_config: dict[str, Any], signature: Signature, engine_sections: tuple[str, ...] = SECTIONS
) -> dict[str, Any]:
    """The fields auto_complete_config adds to `model_config`: only those it leaves out.

    model.py applies them through Triton's setters; trtpool-model applies them to
    the dict before loading a folder, so that both load the same config. Only the
    `engine_sections` sections can come from the model; the others (a process file's
    side) must be declared."""
    filled = completion(signature)
    added: dict[str, Any] = {}
    if not model_config.get("max_batch_size") and filled["max_batch_size"]:
        added["max_batch_size"] = filled["max_batch_size"]
    if filled["max_batch_size"]:
        added["dynamic_batching"] = model_config.get("dynamic_batching", {})
    for section in SECTIONS:
        if model_config.get(section):
            continue
        if section not in engine_sections:
            raise ConfigError(
                f"{section}: config.pbtxt declares none, and with a process file the model's "
                f"{section}s are what process.py takes or returns: declare them in config.pbtxt"
            )
        added[section] = filled[section]
    return added


def _dims_agree(config: list[int], model: list[int]) -> bool:
    """A config dim may fix a dimension the model leaves dynamic, not change a fixed one."""
    return len(config) == len(model) and all(m == -1 or c == m for c, m in zip(config, model, strict=True))


def check_agreement(
    model_config: dict[str, Any], signature: Signature, engine_sections: tuple[str, ...] = SECTIONS
) -> None:
    """Raise ConfigError naming the tensor, the field and both values on any mismatch.

    Sections outside `engine_sections` are a process file's side: config.pbtxt
    declares them, and what process.py does with them is checked per request."""
    configured = model_config.get("max_batch_size", 0)
    if signature.batched and configured > signature.max_batch_size:
        raise ConfigError(
            f"max_batch_size: config.pbtxt says {configured}, the model's largest profile "
            f"allows {signature.max_batch_size}"
        )
    if not signature.batched and configured > 0:
        raise ConfigError(f"max_batch_size: config.pbtxt says {configured}, the model has no batch dimension (0)")
    batched = configured > 0
    for section, specs in (("input", signature.inputs), ("output", signature.outputs)):
        if section not in engine_sections:
            continue
        by_name = {s.name: s for s in specs}
        for entry in model_config.get(section, []):
            name = entry["name"]
            if name not in by_name:
                raise ConfigError(f"{section} '{name}': not in the model, which has {sorted(by_name)}")
            spec = by_name[name]
            if entry["data_type"] != spec.triton_dtype:
                raise ConfigError(
                    f"{section} '{name}' data_type: config.pbtxt says {entry['data_type']}, "
                    f"the model has {spec.triton_dtype}"
                )
            # The model sees `reshape` where there is one (a scalar travels as dims [1], reshape []);
            # protobuf JSON leaves out empty lists.
            field = "reshape" if "reshape" in entry else "dims"
            listed = entry["reshape"].get("shape", []) if field == "reshape" else entry.get("dims", [])
            declared_dims = [int(d) for d in listed]
            expected = model_dims(spec, batched) if field == "reshape" else config_dims(spec, batched)
            if not _dims_agree(declared_dims, expected):
                raise ConfigError(
                    f"{section} '{name}' {field}: config.pbtxt says {declared_dims}, the model has "
                    f"{model_dims(spec, batched)}"
                    + (" (declared as [1])" if not model_dims(spec, batched) else "")
                    + (" (a 0 is declared as -1)" if 0 in spec.shape else "")
                )
        declared = {e["name"] for e in model_config.get(section, [])}
        if section == "input" and declared != set(by_name):
            raise ConfigError(f"input: config.pbtxt declares {sorted(declared)}, the model needs {sorted(by_name)}")

"""Exceptions whose message is meant for the client or the operator as is."""

from __future__ import annotations


class TrtpoolError(Exception):
    """Base class: the message names the tensor, parameter or file and what was expected."""


class ConfigError(TrtpoolError):
    """The model configuration is invalid; the model does not load."""


class EngineError(TrtpoolError):
    """The engine file is missing, corrupt, or built for another TensorRT or GPU."""


class InvalidInput(TrtpoolError):
    """A request's tensors do not match the model; only that request fails."""


class Refused(TrtpoolError):
    """A process file refuses one request for a reason the client can fix (a file that is no
    image, text that is not UTF-8). Its message names what it refuses (Refused.element); the
    client gets it once, after who refused it, without a class name (trtpool.process.preprocess)."""

    @classmethod
    def element(cls, name: str, index: int, reason: object) -> Refused:
        """Refuse element [index] of input `name`: "input 'IMAGE' element [3]: <reason>"."""
        return cls(f"input '{name}' element [{index}]: {reason}")


class ContextFailure(TrtpoolError):
    """An execution context failed while running; the pool rebuilds it."""


class Overloaded(TrtpoolError):
    """The request queue is full; the client should retry later."""


class Cancelled(TrtpoolError):
    """The client cancelled the request before it ran."""


class ProcessError(TrtpoolError):
    """The model's process.py failed or returned what cannot be served; only that request fails."""


class Unavailable(TrtpoolError):
    """The model's engine host is gone or restarting; the client should retry."""

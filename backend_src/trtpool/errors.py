"""Exceptions whose message is meant for the client or the operator as is."""


class TrtpoolError(Exception):
    """Base class: the message names the tensor, parameter or file and what was expected."""


class ConfigError(TrtpoolError):
    """The model configuration is invalid; the model does not load."""


class EngineError(TrtpoolError):
    """The engine file is missing, corrupt, or built for another TensorRT or GPU."""


class InvalidInput(TrtpoolError):
    """A request's tensors do not match the model; only that request fails."""


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

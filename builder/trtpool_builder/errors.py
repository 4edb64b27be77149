"""The builder's own failure: the model or the options cannot be built into an engine."""
from trtpool.errors import TrtpoolError


class BuildError(TrtpoolError):
    """Parsing, converting, quantizing or building failed; the message says where and why."""

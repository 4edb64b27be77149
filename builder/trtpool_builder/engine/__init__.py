"""Building a TensorRT engine and its sidecar, and whether one runs here: the TensorRT module,
the GPU, the build's failures told in the user's terms. Imports graph/ and precision/."""

"""What a model is, independent of how it runs: the builder's interface to the backend.

    signature     tensors, shape ranges, optimization profiles, whether a model is batched
    dtypes        the one table of data types: numpy, Triton, ONNX, ONNX Runtime, TensorRT names
    shapes        the `name=MIN:OPT:MAX` text form of a profile (`profile`, `--shapes`)
    onnx          an ONNX file's inputs and outputs, and its signature with the config's profiles
    zipmap        a ZipMap output served as the tensor of probabilities it reads
    sidecar       the JSON beside an engine: what it was built for, checked at load
    config_pbtxt  config.pbtxt against the model: auto-complete, agreement
    validate      one request's tensors checked against the signature

Nothing here touches a GPU, a runtime or Triton: modules import errors and each other only.
"""

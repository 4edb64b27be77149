"""The torch runtime: ONNX models served by torch on a GPU, through the same pool, batching,
stream, event and buffer code as the TensorRT runtime.

    signature  the ONNX file's signature as this runtime serves it, and its dtypes
    convert    the ONNX file as a torch module (onnx2torch), patched so it can be captured
    runtime    TorchRuntime: one copy of the weights, the bucket policy, the forward pass
    context    TorchContext: a stream, static buffers and a CUDA graph per bucket

Why torch, why the ONNX file is converted at load, and how buckets, graphs and memory work:
docs/design/torch-runtime.md.
"""

"""The device, as trtpool's runtimes use it; no model knowledge, no Triton.

    cuda            checked cuda-python calls: devices, streams, events, memory, copies, graphs
    trt_api         the TensorRT 10/11 and TensorRT-RTX Python API as trtpool calls it
    buffers         per-context preallocated host buffers; gather and split along the batch axis
    host_upload     host request tensors into a context's device buffer through pinned staging
    device_tensors  request tensors on the GPU (torch's, or DeviceArray's by the CUDA array interface)

Every import of cuda-python, TensorRT or torch is made on first use, so the package imports
on a machine without a GPU.
"""

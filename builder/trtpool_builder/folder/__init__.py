"""Triton model folders: config.pbtxt, the model file, a process file, a unary front, and the
checks that the folder loads and answers like its ONNX. Imports graph/, precision/ and engine/."""

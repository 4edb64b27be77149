"""Reading and rewriting ONNX graphs: their inputs and outputs, batch axes, dimension names,
profiles, and the copy a folder serves. The lowest floor: it imports nothing else of the
builder but errors.py."""

"""Test doubles. Nothing here is proof that TensorRT works: it stands in for
libraries that cannot run on the project's CPU-only machines."""

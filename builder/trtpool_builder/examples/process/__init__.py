"""The process files (process.py) of the pipeline examples, copied into their model folders."""

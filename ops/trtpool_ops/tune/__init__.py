"""trtpool-tune: measure a model folder's configurations with tritonserver and
perf_analyzer, search them, and write the one that serves best."""

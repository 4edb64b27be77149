"""Operating trtpool: the serve command, real liveness checks and the dead-stub watchdog.

trtpool-serve  --repo DIR [tritonserver flags]   start, report per-model load results, watch
trtpool-health --url HOST:PORT                  exit 0 only if every ready model answers
"""

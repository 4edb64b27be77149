"""The engine host: one process per model version per device that owns the model.

    tritonserver -> instance 1..N (thin: trtpool.host.client; no CUDA for host inputs)
                 -> Unix socket + memfd slabs (wire.py, slab.py, protocol.py);
                    GPU inputs into device memory the host exports (device_slab.py, CUDA IPC)
                 -> engine host (server.py): the runtime, the context pool, the process
                    file's stages; batches from every instance merged (engine.py)

launch.py finds the host or starts it (the first instance to bind its socket's name).
"""

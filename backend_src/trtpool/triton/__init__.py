"""Everything that touches Triton's pb_utils (the Python backend's module, which exists only in its stub).

    requests      a request's tensors (host, BF16, GPU), probes set apart, copies that outlive execute()
    responders    answers as InferenceResponses with Triton's status codes: through a response
                  sender, or in the list execute() returns
    bfloat16      BF16 tensors across the stub's boundary by DLPack
    probes        liveness probes: requests marked with the trtpool_probe parameter
    metrics       trtpool's counters on Triton's metrics endpoint
    status_relay  Triton status codes carried across a front's BLS hop
    stub_check    the stub's numpy hand-over checked at load
    pb_api        the slice of pb_utils trtpool calls, as Protocols: the types of what the others take

Each takes pb_utils (or objects made by it) as an argument: the code imports without Triton.
"""

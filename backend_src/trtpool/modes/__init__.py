"""How each mode turns Triton requests into work and answers them; one module per mode.

    sync       execute() runs the batch on the pool and returns the responses
    pipelined  execute() starts the batch on a free context and returns; a completion
               thread answers through each request's response sender (any client)
    decoupled  execute() queues the requests for the scheduler and returns at once;
               workers answer through each request's response sender (streaming clients)
    front      a unary front for a decoupled model (forward_to): checked at load, it forwards
               each request with BLS and returns its single response (HTTP /infer, unary gRPC)
    hosted     engine_host on: execute() checks the batch, hands it to the model's engine
               host (trtpool.host) and returns the host's answers

The handlers take Triton's ``pb_utils`` module as an argument: it exists only inside the
Python backend's stub.
"""

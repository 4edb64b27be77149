"""Requests to batches to contexts, runtime-agnostic and Triton-agnostic.

    answer    the one notion of an answer: a Responder answers one request exactly once
    pool      the context pool: sizing, fair hand-out, failure and rebuild, elasticity, statistics
    batching  requests validated, planned into batches a profile admits, run on the pool, and
              their outputs split back to each request's responder

Everything a mode, the process file's stages or the engine host does with a batch goes
through BatchRunner; only runtimes/base.py's contract is seen of a runtime.
"""

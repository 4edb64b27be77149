"""A model folder's process.py and how it runs around the engine.

    file         the user's process file: its faces, loaded and set up from the version folder only
    faces        which faces serve: the per-request functions or the batch ones (process_faces)
    preprocess   the preprocess faces, checked: engine inputs, or the request's refusal
    postprocess  the postprocess faces on the post workers, checked against config.pbtxt's outputs
    answering    responders that postprocess before they answer
    stages       the Stage every mode hands its requests to: pre workers, then the engine, then post
    workers      preprocess in worker processes (preprocess_processes)
    observe      per-call timings and outcomes for the stage metrics

User code never raises into the instance: whatever it does becomes one request's error.
"""

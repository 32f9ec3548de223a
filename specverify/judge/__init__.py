"""One call of an implementation, judged: arenas of poisoned memory (`materialize`), calls here or in a
contained worker process (`calls`, `worker`, `sandbox`), the byte comparison and the verdict on the call
(`compare`, `harness`), and the device's measurements (`device`, `probes`, `timing`). Imports the records.
"""

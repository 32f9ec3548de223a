"""A run: the checks asked of a target (`checks`: the protocol and the catalogue), Hypothesis profiles
and searches, the session that runs (target, check) pairs, sharded and Ray runs, the device property
checks, the corpus check, information draws beyond a declared domain, and the verdicts by level.
"""

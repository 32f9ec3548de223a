"""Mutation runs (`specverify mutate`): the mutants of an implementation's source, the run that judges
each, and its report.
"""

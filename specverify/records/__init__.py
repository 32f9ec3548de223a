"""The stage records' machinery: the record and its example (`stage`), rule dialects, declared domains,
the registry of every family's records, backends and targets, the benchmark inputs' building blocks, and
the contract data generated from the records. Imports nothing of the other wings.
"""

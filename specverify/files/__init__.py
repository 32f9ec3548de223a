"""What the suite is handed and keeps: case files and their fields, the corpus on disk, vendors and
their declarations, waiver files, provenance, bounded reads. Imports the records and the judge.
"""

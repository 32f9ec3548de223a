"""What a person or a machine reads: the terminal's tables and failure reports, the report files (JSON,
JUnit, Markdown), the conformance matrix and its page, and the stage contracts rendered.
"""

import pytest


@pytest.fixture(autouse=True)
def findings_in_scratch(tmp_path_factory, monkeypatch):
    """The cases the tests' own runs find go to this session's scratch folder, not ./specverify-findings
    of the checkout (a test that needs the default unsets SPECVERIFY_FINDINGS)."""
    monkeypatch.setenv("SPECVERIFY_FINDINGS", str(tmp_path_factory.getbasetemp() / "findings"))

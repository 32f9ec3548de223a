"""The generated tests: every check of every stage on every backend and device (those not here skip with
the reason)."""
import pytest

from specverify.pytest_plugin import run_stage_check, stage_matrix


@pytest.mark.parametrize("stage,backend,device,check", stage_matrix())
def test_stage(request, stage, backend, device, check):
    run_stage_check(request.config, stage, backend, device, check)

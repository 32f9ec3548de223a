"""An in-place input the call should have updated and left as it was is shown as unchanged, with its value:
its bytes before the call are the input, not the harness's poison."""
from specverify.cli import main


def test_a_counter_left_unchanged_is_not_called_poison(capsys):
    status = main(["check", "--stage", "seeded.chain_sampling", "--impl", "tests.inout_counter_kept:chain_sampling",
                   "--check", "valid", "--device", "cpu"])
    out = capsys.readouterr().out
    assert status == 1 and "(unchanged: its value before the call)" in out, out[-3000:]
    assert "poison: never written" not in out

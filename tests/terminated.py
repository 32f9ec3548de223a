"""A `specverify` run sent SIGTERM once something has started in it: the run's output, after checking that it
ended as documented (exit 1, "interrupted by SIGTERM"). The process is killed with its group if it
outlives the test."""
import os
import signal
import subprocess
import time
from typing import Callable


def terminated_once(proc: subprocess.Popen, started: Callable[[], bool], what: str,
                    first: Callable[[], None] = lambda: None) -> str:
    """Run `first` (it may read and check the first lines), wait (60 s at most) until `started()`, send
    SIGTERM, and return everything else `proc` printed."""
    try:
        first()
        deadline = time.monotonic() + 60
        while not started() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started(), what
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0].decode()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, out
    assert "interrupted by SIGTERM" in out
    return out

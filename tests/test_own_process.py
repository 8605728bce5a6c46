"""`tasks.in_own_process`: one job in a process of its own (the trajectory recovery, whose solver holds the
interpreter lock). Its result and its error come back as themselves, a stop ends it at once, and a process that
dies without a result is an error that says so, never a hang or a None taken for a result."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from support import jobs

from spatial_release import tasks


def test_the_result_comes_back_from_another_process():
    assert np.array_equal(tasks.in_own_process(jobs.squares, 1000), np.arange(1000) ** 2)
    assert tasks.in_own_process(jobs.pid) != os.getpid()


def test_the_jobs_error_is_raised_as_itself():
    with pytest.raises(ValueError, match="no such figure"):
        tasks.in_own_process(jobs.refuse, "no such figure")


def test_a_stop_ends_the_process_at_once():
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.perf_counter()
    with pytest.raises(tasks.JobStopped, match="recovery: stopped"):
        tasks.in_own_process(jobs.sleep, 60.0, stop=stop, name="recovery")
    assert time.perf_counter() - started < 10  # not the job's 60 s
    # negative control: unstopped, the same job ends and returns
    assert tasks.in_own_process(jobs.sleep, 0.1, stop=threading.Event()) == "slept"


def test_a_process_killed_without_a_result_is_an_error():
    with pytest.raises(tasks.JobProcessEnded, match="exit code -9 and no result"):
        tasks.in_own_process(jobs.killed, name="recovery")


UNGUARDED = """
import sys, threading
from pathlib import Path
with open(sys.argv[1], "a") as marker:
    marker.write(__name__ + "\\n")
if __name__ == "__main__":  # only what the test needs to stop a re-import from starting a process again
    from spatial_release import tasks
    from support import jobs
    call = lambda: print(tasks.in_own_process(jobs.squares, 4).tolist())
    if sys.argv[2] == "thread":
        worker = threading.Thread(target=call)
        worker.start()
        worker.join()
    else:
        call()
"""


@pytest.mark.parametrize("caller", ["main", "thread"])
def test_a_script_on_one_thread_forks_and_is_not_imported_again(tmp_path, caller):
    """A script calling from its only thread forks (as `tasks.pool` does): its top level runs once, so one
    without a `__main__` guard keeps working and never runs its work twice. Negative control: called from a
    second thread, the job runs in a fork server's child, which imports the script again (as `__mp_main__`)."""
    import subprocess
    import sys
    from pathlib import Path

    script, marker = tmp_path / "unguarded.py", tmp_path / "marker.txt"
    script.write_text(UNGUARDED)
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
    done = subprocess.run(
        [sys.executable, str(script), str(marker), caller], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 1, 4, 9]"
    imported = marker.read_text().split()
    assert imported == (["__main__"] if caller == "main" else ["__main__", "__mp_main__"])

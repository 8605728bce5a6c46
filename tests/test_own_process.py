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

"""Long steps report progress: the heartbeat keeps a step's messages at most its interval apart."""

import time

import pytest

from spatial_release.progress import event_of, heartbeat


def _gaps(times: list[float], started: float, ended: float) -> list[float]:
    marks = [started, *times, ended]
    return [b - a for a, b in zip(marks, marks[1:])]


@pytest.mark.slow
def test_a_silent_step_is_heard_every_interval():
    """A step silent for 2 s under a 0.2 s heartbeat: no gap between messages over the interval (with a
    scheduler's slack wide enough for a loaded machine), each beat a structured event of the step. Negative
    control: the same step's own messages alone leave a gap of a second, which the same measure rejects."""
    every, slack, heard, own = 0.2, 0.5, [], []
    started = time.monotonic()
    with heartbeat(lambda m: heard.append((time.monotonic(), m)), "risk", every=every) as progress:
        time.sleep(1.0)
        progress("risk: halfway")
        own.append(time.monotonic())
        time.sleep(1.0)
    ended = time.monotonic()
    beats = [m for _, m in heard if m != "risk: halfway"]
    assert len(beats) >= 3 and all((e := event_of(m)) is not None and e.step == "risk" for m in beats)
    assert all(str(m).startswith("risk: still running, ") for m in beats)
    assert max(_gaps([t for t, _ in heard], started, ended)) < every + slack
    assert max(_gaps(own, started, ended)) > every + slack  # the step alone: silent for a second


def test_the_heartbeat_stops_with_its_step_even_when_it_fails():
    heard: list[str] = []
    with pytest.raises(RuntimeError), heartbeat(heard.append, "risk", every=0.05):
        raise RuntimeError("the step failed")
    count = len(heard)
    time.sleep(0.2)
    assert len(heard) == count  # nothing after the step ended

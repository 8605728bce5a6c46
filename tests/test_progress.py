"""Long steps report progress: the heartbeat keeps a step's messages at most its interval apart."""

import time

import pytest

from spatial_release.progress import ProgressEvent, event_of, heartbeat


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


def test_the_heartbeat_names_the_phase_the_step_is_in():
    """The protection step suppresses, then assesses the candidate's risk: each beat names the phase of the last
    message that opened work, counted from that message, and the step itself once that phase closes. Negative
    control: a beat after the suppression's closing message must not say the suppression is still running."""
    every = 0.1
    heard: list[tuple[float, str]] = []
    with heartbeat(lambda m: heard.append((time.monotonic(), m)), "protection", every=every) as progress:
        time.sleep(0.35)
        progress(ProgressEvent("suppression", "suppression: 30% of the table protected", share=0.3))
        time.sleep(0.35)
        progress(ProgressEvent("suppression", "suppression: every block protected in 0.7 s", done=True))
        time.sleep(0.35)
        risk_started = time.monotonic()
        progress(ProgressEvent("risk", "risk: assessing the candidate against the advantage gate"))
        time.sleep(0.35)
    texts = [m for _, m in heard]
    opened, closed, assessing = (
        texts.index("suppression: 30% of the table protected"),
        texts.index("suppression: every block protected in 0.7 s"),
        texts.index("risk: assessing the candidate against the advantage gate"),
    )
    beats = {
        "before": texts[:opened],
        "suppressing": texts[opened + 1 : closed],
        "after suppression": texts[closed + 1 : assessing],
        "assessing": texts[assessing + 1 :],
    }
    expected = {"before": "protection", "suppressing": "suppression", "after suppression": "protection", "assessing": "risk"}
    for phase, step in expected.items():
        assert beats[phase], f"no beat while {phase}"
        assert all(str(b).startswith(f"{step}: still running, ") for b in beats[phase]), (phase, beats[phase])
        assert all((e := event_of(b)) is not None and e.step == step for b in beats[phase])
    # the risk phase is counted from its own start, not from the step's: under a second, not over one
    last = event_of(beats["assessing"][-1])
    assert last is not None and last.seconds is not None and last.seconds <= time.monotonic() - risk_started + every
    assert not any(str(b).startswith("suppression: still running") for b in beats["after suppression"])

"""A step's deliberate refusal (defs.release.Refusal) is recorded without a stack trace, its reason and what
to do as the step failure's words; any other failure keeps the stack the run page shows (the control)."""

import dagster as dg

from spatial_release.defs.release.assets import Refusal


def _failure(raised: Exception) -> dg.DagsterEvent:
    @dg.op
    def refuses() -> None:
        raise raised

    @dg.job
    def one_step() -> None:
        refuses()

    result = one_step.execute_in_process(raise_on_error=False)
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return failure


def test_a_refusal_is_recorded_with_its_words_and_no_stack_trace():
    failure = _failure(Refusal("demo 2018-Q1 is already published", "nothing to do", {"refusal": "already_published"}))
    error, refused = failure.step_failure_data.error, failure.step_failure_data.user_failure_data
    assert error is not None and refused is not None
    assert error.stack == [] and error.cause is None and error.cls_name is None
    assert error.message == "Refused, not failed: demo 2018-Q1 is already published. What to do: nothing to do."
    # still a dg.Failure: its description (the alert's reason) and metadata, and no retry
    assert refused.description == "demo 2018-Q1 is already published"
    assert refused.metadata["what_to_do"].value == "nothing to do"
    assert refused.metadata["refusal"].value == "already_published"


def test_control_any_other_failure_keeps_its_stack_trace():
    failure = _failure(dg.Failure(description="a real failure", allow_retries=False))
    error = failure.step_failure_data.error
    assert error is not None
    assert error.stack, "Dagster records a Failure's frames: the run page shows them"
    assert error.message.startswith("dagster._core.definitions.events.Failure: a real failure")

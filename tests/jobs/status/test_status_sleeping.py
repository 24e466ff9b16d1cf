"""derive_status of a predictor ServeDeck scaled to zero (scaling.minReplicas 0, idle): the
InferenceService carries servedeck.io/sleeping, and the phase reads Sleeping while its pods go
and once they are gone; a stop or a delete still comes first."""

import pytest

from jobs.models import Phase
from jobs.status import derive_status
from tests.jobs.status.test_status import NOW, P1, cond, isvc, serving

ASLEEP = {"servedeck.io/sleeping": "true", "serving.kserve.io/autoscalerClass": "none"}


@pytest.mark.parametrize(
    ("obj", "pods", "phase", "words"),
    [
        (isvc(cond("Ready", "False"), annotations=ASLEEP), [], Phase.SLEEPING, "scaled to zero"),
        (
            isvc(cond("Ready"), annotations=ASLEEP),
            [serving(P1)],
            Phase.SLEEPING,
            "1 pod still shutting down",
        ),
        (
            isvc(cond("Ready"), annotations={**ASLEEP, "serving.kserve.io/stop": "true"}),
            [],
            Phase.STOPPED,
            "stopped",
        ),
        (isvc(cond("Ready"), annotations=ASLEEP, deleted=1), [], Phase.DELETING, "Deleting"),
        # Awake again (the annotation gone): what the pods say.
        (isvc(cond("Ready")), [serving(P1)], Phase.RUNNING, ""),
    ],
)
def test_a_predictor_scaled_to_zero_reads_sleeping(obj, pods, phase, words):
    status = derive_status(obj, pods, [], desired_replicas=1, now=NOW)
    assert status.phase == phase, status
    assert words in status.reason
    if phase == Phase.SLEEPING:
        assert "next request through the gateway wakes it" in status.next_step

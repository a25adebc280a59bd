"""yoloq's scheduling core: pure functions over frozen data, no I/O, no clock.

    decision = decide(snapshot, policy, now)

The GPU worker builds the Snapshot and applies the Decision; the simulator
drives the same `decide` with simulated time.
"""

from work_pools.policy.calibrate import Calibrator, EtaRecord, Interval, calibrate
from work_pools.policy.checkpoints import CheckpointPlan, checkpoint_interval, should_checkpoint
from work_pools.policy.decide import decide
from work_pools.policy.eta import Eta, estimate
from work_pools.policy.fairshare import UsageLedger, charge, share_ratios, tu
from work_pools.policy.model import (DELAYED_RANK, FULL, LOCAL_NODE, SHORT, Admission, Decision,
                                     Gpu, Job, Policy, Preemption, Quota, QuotaBreach, Segment,
                                     Snapshot, Throttle)
from work_pools.policy.priority import effective_priority, starvation_bound_s
from work_pools.policy.rules import check_tier_allowed

# Last: the function `priority` must win over the submodule of the same name.
from work_pools.policy.baselines import POLICIES, fifo, las, policy_by_name, priority, yoloq

__all__ = [
    "DELAYED_RANK", "FULL", "LOCAL_NODE", "POLICIES", "SHORT", "Admission", "Calibrator",
    "CheckpointPlan", "Decision", "Eta", "EtaRecord", "Gpu", "Interval", "Job", "Policy",
    "Preemption", "Quota", "QuotaBreach", "Segment", "Snapshot", "Throttle", "UsageLedger",
    "calibrate", "charge", "check_tier_allowed", "checkpoint_interval", "decide",
    "effective_priority", "estimate", "fifo", "las", "policy_by_name", "priority",
    "share_ratios", "should_checkpoint", "starvation_bound_s", "tu", "yoloq",
]

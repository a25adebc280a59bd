"""Wait-time estimates in the simulator, scored as the live board shows them: the very
`EtaTracker` of `work_pools.policy.eta_tracker` (raw forward run at submit, calibrated
from the records of jobs that already started, with the arrival factor as a feature;
only the past is used, as live)."""

from work_pools.policy.eta_tracker import EtaTracker, Prediction, drain_time_s

__all__ = ["EtaTracker", "Prediction", "drain_time_s"]

"""The `yolo-gpu` work pool: worker type (`work_pools.worker`), pure scheduling policy
(`work_pools.policy`), inventory and the trace-replay simulator.

The worker is registered with Prefect through the `prefect.collections` entry
point (`work_pools.worker`), so `prefect work-pool create NAME --type yolo-gpu`
and `prefect worker start --pool NAME --type yolo-gpu` find it. This package
itself imports nothing heavy: the policy and simulator need no Prefect.
"""

"""The yoloq REST API (FastAPI): jobs, queue, usage, policy and teams under `/v1`, for teams
on their own machines. Served by the stack (`python -m yoloq.api`); see `create_app`."""

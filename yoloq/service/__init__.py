"""The service layer: what the CLI, the REST API and the web page all call.

Each function takes a sync Prefect client (from `connection.stack_client`) or opens one, and
returns typed results; the callers only render them. One admission path
(`admission.admit`), one view of a job (`jobs.job_view`), one history (`jobs.history`).

- `connection`: the Prefect client for this host's stack (or an explicit PREFECT_API_URL).
- `admission`: the verdict on a job spec (analysis, tier cap, fit on the pool).
- `submission`: create the `yolo-job` runs of admitted jobs.
- `jobs`: a job's view, its history, cancel and retier.
- `teams`: add, remove and list teams, their limits and quotas.
- `usage`: Training Units per team and job; time windows.
"""

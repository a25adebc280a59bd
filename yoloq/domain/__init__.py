"""What a job is, without Prefect or torch: the spec, sweeps, tiers, GPU types, segment lengths,
and the segment contract (the plan, the labels and tags on Prefect runs, what a run's outcome was)."""

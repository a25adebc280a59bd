"""What a job is, without Prefect or torch: the spec, sweeps, tiers, GPU types and segment lengths."""

"""What the system of record holds (Prefect runs, events, variables and blocks; the MLflow run; the team store), read and written."""

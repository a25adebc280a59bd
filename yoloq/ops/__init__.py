"""Running the stack: the Prefect server, pools and deployments, the MLflow server, `yoloq up`/`down`."""

"""Reaching a remote yoloq server: the REST client and the saved credentials."""

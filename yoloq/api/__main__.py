"""`python -m yoloq.api [--port P] [--host H]`: serve the REST API with uvicorn.

Defaults: host `$YOLOQ_API_HOST` or 127.0.0.1, port `$YOLOQ_API_PORT` or the Prefect port
plus one. The stack (`yoloq up`) starts it with its own environment. While it serves, the
state folder holds its local operator secret (`yoloq.client.local_stack`), removed when it stops.
"""

from __future__ import annotations

import argparse

from yoloq.settings import exit_on_bad_settings, settings


def main(argv: list[str] | None = None) -> None:
    exit_on_bad_settings()
    from yoloq.ops.stack import current_stack, use_stack

    stack = current_stack()
    parser = argparse.ArgumentParser(prog="python -m yoloq.api")
    parser.add_argument("--host", default=settings().api_host)
    parser.add_argument("--port", type=int, default=stack.rest_port)
    args = parser.parse_args(argv)
    use_stack(stack)  # before prefect is imported: its client talks to this stack's server
    import uvicorn

    from yoloq.api.app import create_app
    from yoloq.api.auth import accept_operator
    from yoloq.client import local_stack

    app = create_app()
    secret = local_stack.publish(args.host, args.port, stack.port)
    accept_operator(secret)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="info", access_log=False)
    finally:
        local_stack.withdraw(secret)


if __name__ == "__main__":
    main()

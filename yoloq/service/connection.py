"""The Prefect client for the stack of this state folder (or the server an explicit
PREFECT_API_URL names): the one way the service layer reaches Prefect."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from yoloq.base.errors import UserError
from yoloq.settings import settings

# A loaded SQLite-backed server can take seconds to answer its health check; that is not "down"
# (a stopped one refuses at once). The API process checks at every client it opens, under load.
ANSWER_TIMEOUT_S = 5.0


@contextmanager
def stack_client() -> Iterator[Any]:
    """A sync Prefect client for the stack of this state folder; a clear error if it is down.

    An explicit PREFECT_API_URL (without YOLOQ_PORT, which pins this host's stack) names the
    server to use. A command that only reads never creates the state folder: without one and
    without such a URL, no stack runs here.
    """
    from yoloq.base.paths import state_paths
    from yoloq.base.prefect_auth import check_access
    from yoloq.base.prefect_tls import share_client_tls_context
    from yoloq.ops.stack import current_stack, use_stack

    share_client_tls_context()
    paths = state_paths()
    explicit = explicit_api_url()
    if explicit is None and not paths.root.is_dir():
        raise UserError("stack", f"no yoloq state folder at {paths.root}, so no stack runs for it",
                        "start one with `yoloq up`, or point --home/YOLOQ_HOME at an existing state folder")
    stack = current_stack()
    url = explicit or stack.api_url
    _require_answer(url, explicit is not None)
    use_stack(stack)
    os.environ["PREFECT_API_URL"] = url
    check_access(url)
    from prefect.client.orchestration import get_client

    with _pointed_at(url), get_client(sync_client=True) as client:
        yield client


def stack_answers_here() -> bool:
    """Does a stack answer for this state folder (or the explicit PREFECT_API_URL)? Creates
    nothing: `yoloq analyse` asks before it reads the pool, and checks alone without one."""
    from yoloq.base.paths import state_paths
    from yoloq.ops.stack import api_answers, current_stack

    explicit = explicit_api_url()
    if explicit is None and not state_paths().root.is_dir():
        return False
    return api_answers(explicit or current_stack().api_url, timeout_s=ANSWER_TIMEOUT_S)


@contextmanager
def _pointed_at(url: str) -> Iterator[None]:
    """This process's Prefect settings point at `url`, even if prefect was imported before (its
    settings are read at import); a settings copy costs ~0.2 s, so only when needed."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value() == url:
        yield
        return
    with temporary_settings(updates={PREFECT_API_URL: url}):
        yield


def explicit_api_url() -> str | None:
    """PREFECT_API_URL as the user set it, unless YOLOQ_PORT names this host's stack (the stack's
    own processes and tests set both)."""
    url = (os.environ.get("PREFECT_API_URL") or "").strip().rstrip("/")
    return url if url and not settings().port else None


def _require_answer(url: str, explicit: bool) -> None:
    from yoloq.ops.stack import api_answers

    if api_answers(url, timeout_s=ANSWER_TIMEOUT_S):
        return
    if explicit:
        raise UserError("PREFECT_API_URL", f"no Prefect server answers on {url}",
                        "check the address, or unset PREFECT_API_URL to use this host's `yoloq up` stack")
    raise UserError("stack", f"no yoloq server answers on {url}",
                    "start it with `yoloq up` (same --home/YOLOQ_HOME)")

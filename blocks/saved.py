"""Loading a saved configuration block, when there is a server to load it from."""

from __future__ import annotations

import os
from typing import TypeVar

from prefect.blocks.core import Block

B = TypeVar("B", bound=Block)


def load_saved(cls: type[B], name: str) -> B | None:
    """The block saved as `name`, or None: no API configured, blocks turned off
    (`YOLOQ_USE_BLOCKS=0`), not saved on this server, or the server unreachable."""
    if os.environ.get("YOLOQ_USE_BLOCKS", "1") != "1" or not api_url():
        return None
    try:
        return cls.load(name, _sync=True)
    except Exception:
        return None


def api_url() -> str:
    """The URL Prefect's client will use (never an ephemeral server started on demand)."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or ""

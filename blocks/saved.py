"""Loading a saved configuration block, when there is a server to load it from.

Two outcomes only: the block, or "not configured" (None) when there is no API,
block use is turned off, or no block of that name is saved. Anything else (the
server unreachable, a document that no longer validates, an unknown block type)
raises `BlockUnreadable`: a caller must never quietly switch to another store.
"""

from __future__ import annotations

from typing import TypeVar

from prefect.blocks.core import Block

from yoloq.settings import settings

B = TypeVar("B", bound=Block)


class BlockUnreadable(RuntimeError):
    """A saved block exists (or may exist) but could not be loaded."""


def load_saved(cls: type[B], name: str) -> B | None:
    """The block saved as `name`; None when it is not configured (see the module doc)."""
    if not settings().use_blocks or not api_url():
        return None
    try:
        return cls.load(name, _sync=True)
    except Exception as exc:
        if _not_saved(exc):
            return None
        raise BlockUnreadable(
            f"saved block {name!r} ({cls.__name__}) could not be loaded from {api_url()}: "
            f"{exc.__class__.__name__}: {_first_line(exc)}") from exc


def _not_saved(exc: Exception) -> bool:
    """Prefect reports a missing document as a plain ValueError ("Unable to find ...");
    a document that fails validation is a pydantic ValidationError (also a ValueError)."""
    from pydantic import ValidationError
    from prefect.exceptions import ObjectNotFound

    if isinstance(exc, ObjectNotFound):
        return True
    return (type(exc) is ValueError and not isinstance(exc, ValidationError)
            and str(exc).startswith("Unable to find"))


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else "(no message)"


def api_url() -> str:
    """The URL Prefect's client will use (never an ephemeral server started on demand)."""
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or ""

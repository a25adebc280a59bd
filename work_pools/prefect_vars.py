"""Create-or-update a Prefect Variable: how node agents and the scheduler publish state."""

from __future__ import annotations

from typing import Any


async def upsert_variable(client: Any, name: str, value: Any, tags: list[str] | None = None) -> None:
    """Update first (one request in the steady state: a heartbeat, a board), create on 404."""
    import httpx
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate
    from prefect.exceptions import ObjectAlreadyExists

    try:
        await client.update_variable(VariableUpdate(name=name, value=value))
        return
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code != 404:
            raise
    try:
        await client.create_variable(VariableCreate(name=name, value=value, tags=tags or []))
    except ObjectAlreadyExists:  # created meanwhile by a twin: update it instead
        await client.update_variable(VariableUpdate(name=name, value=value))


async def read_variables_named(client: Any, prefix: str) -> list[Any]:
    """The Variables whose names start with `prefix`, filtered by the server (a plain
    `read_variables` returns only the first page of every Variable of the stack)."""
    return _named(await client.request("POST", "/variables/filter", json=_filter(prefix)), prefix)


def read_variables_named_sync(client: Any, prefix: str) -> list[Any]:
    """`read_variables_named` through a sync client."""
    return _named(client.request("POST", "/variables/filter", json=_filter(prefix)), prefix)


def _filter(prefix: str) -> dict[str, Any]:
    return {"variables": {"name": {"like_": prefix}}, "limit": 200}  # 200: the API's page cap


def _named(response: Any, prefix: str) -> list[Any]:
    from prefect.client.schemas.objects import Variable

    return [v for v in Variable.model_validate_list(response.json()) if v.name.startswith(prefix)]

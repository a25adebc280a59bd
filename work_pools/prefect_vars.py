"""Create-or-update a Prefect Variable: how node agents and the scheduler publish state."""

from __future__ import annotations

from typing import Any


async def upsert_variable(client: Any, name: str, value: Any, tags: list[str] | None = None) -> None:
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate
    from prefect.exceptions import ObjectAlreadyExists

    if await client.read_variable_by_name(name) is None:
        try:
            await client.create_variable(VariableCreate(name=name, value=value, tags=tags or []))
            return
        except ObjectAlreadyExists:  # created meanwhile by a twin: update it instead
            pass
    await client.update_variable(VariableUpdate(name=name, value=value))

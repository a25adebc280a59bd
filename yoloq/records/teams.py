"""The team store: who may use the yoloq API, with which token, as which team.

One JSON file, `<state>/teams.json`, mode 0600, written atomically under a lock file. Only the
API server (and `yoloq team` on the server host) reads it: token hashes never travel through
the Prefect API, where any Prefect client could read a Variable or Block. Weights, tier caps and
quotas are not kept here but in the `yoloq-policy` block, which the scheduler already enforces.

A token is `yq_<id>_<secret>`: the id (not secret) finds the entry, the secret is checked
against its argon2 hash. The plain token is returned once, when it is made, and never stored.
Checks are cached by a SHA-256 of the presented token (never the token itself): a valid one
until teams.json changes, a refused one also for at most `REFUSED_TTL_S` (at most
`REFUSED_MAX` kept), so a repeated wrong secret costs one argon2 verification, not one per try.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from yoloq.base.errors import UserError

STORE_NAME = "teams.json"
TOKEN_PREFIX = "yq"
FILE_MODE = 0o600
LOCAL_OPERATOR = "@local"  # the operator's team: not a valid team name, so no team can be it
REFUSED_TTL_S = 60.0  # a refused token is checked again after this long
REFUSED_MAX = 4096  # refused tokens remembered at most (the oldest is forgotten first)


@dataclass(frozen=True)
class Caller:
    """Who a request comes from: the token's team, the token's label, and admin or not."""

    team: str
    label: str
    admin: bool = False
    user: str = ""  # set for the local operator only: the OS user the host's CLI acts for

    @property
    def actor(self) -> str:
        """The audit log's actor: `team/label`, or the local operator's OS user (as a local command)."""
        return self.user or f"{self.team}/{self.label}"

    @property
    def local(self) -> bool:
        """The host's own CLI, holding the stack's operator secret (`yoloq.client.local_stack`)."""
        return self.team == LOCAL_OPERATOR


@dataclass
class TeamEntry:
    """A team as stored: its owner's mail address, admin flag and one token (hashed)."""

    name: str
    owner: str = ""
    admin: bool = False
    label: str = "default"
    token_id: str = ""
    token_hash: str = ""
    created: float = field(default_factory=time.time)
    rotated: float | None = None

    def public(self) -> dict[str, Any]:
        """What `team list` and `GET /v1/teams` show (no hash)."""
        return {"team": self.name, "owner": self.owner, "admin": self.admin, "label": self.label,
                "token_id": self.token_id, "created": self.created, "rotated": self.rotated}


def store_path(root: Path | None = None) -> Path:
    from yoloq.base.paths import state_paths

    return (root or state_paths().root) / STORE_NAME


def _hasher():
    from argon2 import PasswordHasher

    return PasswordHasher()


def _new_token() -> tuple[str, str]:
    token_id = secrets.token_hex(6)
    return token_id, f"{TOKEN_PREFIX}_{token_id}_{secrets.token_urlsafe(24)}"


def token_id_of(token: str) -> str | None:
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1]


def check_team_name(name: str) -> str:
    from yoloq.domain.spec import _NAME_PATTERN

    if not _NAME_PATTERN.match(name or ""):
        raise UserError("team", f"{name!r} is not a team name",
                        "use lowercase letters, digits, '.', '_' or '-' (at most 63), as in job specs")
    return name


class TeamStore:
    """Read, change and check the team file. Every change is read-modify-write under a lock."""

    def __init__(self, path: Path | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path or store_path()
        self.clock = clock
        self.verifications = 0  # argon2 verifications done (the cost the caches save)
        self._cache: dict[str, Caller] = {}
        self._refused: OrderedDict[str, float] = OrderedDict()  # token digest -> expires at
        self._cache_stamp: tuple[int, int] | None = None
        self._cache_lock = threading.Lock()

    # reading
    def teams(self) -> dict[str, TeamEntry]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError("teams", f"cannot read the team store {self.path}: {exc}",
                            "restore the file or remove it and add the teams again") from None
        return {name: TeamEntry(**entry) for name, entry in (raw.get("teams") or {}).items()}

    def get(self, name: str) -> TeamEntry:
        entry = self.teams().get(name)
        if entry is None:
            raise UserError("team", f"no team named {name!r}", "list teams with `yoloq team list`")
        return entry

    # changing
    def add(self, name: str, owner: str = "", admin: bool = False, label: str = "default") -> str:
        """Add a team; returns its token (the only time it is seen)."""
        check_team_name(name)
        token_id, token = _new_token()
        entry = TeamEntry(name=name, owner=owner, admin=admin, label=label, token_id=token_id,
                          token_hash=_hasher().hash(token))

        def change(teams: dict[str, TeamEntry]) -> None:
            if name in teams:
                raise UserError("team", f"{name!r} already exists",
                                f"rotate its token with `yoloq team rotate {name}`, or pick another name")
            teams[name] = entry

        self._edit(change)
        return token

    def rotate(self, name: str) -> str:
        """A new token for the team; the old one stops working at once."""
        token_id, token = _new_token()
        digest = _hasher().hash(token)

        def change(teams: dict[str, TeamEntry]) -> None:
            entry = _existing(teams, name)
            entry.token_id, entry.token_hash, entry.rotated = token_id, digest, time.time()

        self._edit(change)
        return token

    def remove(self, name: str) -> TeamEntry:
        removed: list[TeamEntry] = []
        self._edit(lambda teams: removed.append(teams.pop(_existing(teams, name).name)))
        return removed[0]

    def _edit(self, change: Callable[[dict[str, TeamEntry]], None]) -> None:
        with self._locked():
            teams = self.teams()
            change(teams)
            self._write(teams)

    def _write(self, teams: dict[str, TeamEntry]) -> None:
        from yoloq.base.atomic import write_atomically

        data = {"teams": {name: asdict(entry) for name, entry in sorted(teams.items())}}
        write_atomically(self.path, lambda out: out.write(json.dumps(data, indent=2).encode()),
                         mode=FILE_MODE)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_suffix(".lock"), os.O_CREAT | os.O_RDWR, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # checking
    def caller(self, token: str | None) -> Caller | None:
        """The caller a token belongs to, or None (no such token, or one rotated away)."""
        token_id = token_id_of(token) if token else None
        if token is None or token_id is None:
            return None
        key = hashlib.sha256(token.encode()).hexdigest()
        hit, found = self._cached(key)
        if hit:
            return found
        found = self._verify(token, token_id)
        self._remember(key, found)
        return found

    def _cached(self, key: str) -> tuple[bool, Caller | None]:
        """(known, caller) from the caches, both dropped when the file changed."""
        stamp, now = self._stamp(), self.clock()
        with self._cache_lock:
            if stamp != self._cache_stamp:
                self._cache, self._cache_stamp = {}, stamp
                self._refused.clear()
            if key in self._cache:
                return True, self._cache[key]
            expires = self._refused.get(key)
            if expires is not None and expires > now:
                return True, None
            self._refused.pop(key, None)
            return False, None

    def _remember(self, key: str, found: Caller | None) -> None:
        with self._cache_lock:
            if found is not None:
                self._cache[key] = found
                return
            self._refused[key] = self.clock() + REFUSED_TTL_S
            while len(self._refused) > REFUSED_MAX:
                self._refused.popitem(last=False)

    def _verify(self, token: str, token_id: str) -> Caller | None:
        from argon2.exceptions import InvalidHashError, VerificationError

        entry = next((e for e in self.teams().values() if e.token_id == token_id), None)
        if entry is None:
            return None
        self.verifications += 1
        try:
            _hasher().verify(entry.token_hash, token)
        except (VerificationError, InvalidHashError):
            return None
        return Caller(team=entry.name, label=entry.label, admin=entry.admin)

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_ino


def _existing(teams: dict[str, TeamEntry], name: str) -> TeamEntry:
    if name not in teams:
        raise UserError("team", f"no team named {name!r}", "list teams with `yoloq team list`")
    return teams[name]


def owner_of(team: str, store: TeamStore | None = None) -> str:
    """The team owner's mail address ('' when none is set or the team is unknown)."""
    entry = (store or TeamStore()).teams().get(team)
    return entry.owner if entry else ""

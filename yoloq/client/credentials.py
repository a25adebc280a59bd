"""Where the CLI finds a remote yoloq server: `YOLOQ_SERVER` / `YOLOQ_TOKEN`, else the file
`yoloq login` wrote (`$XDG_CONFIG_HOME/yoloq/credentials.toml`, default `~/.config/...`,
mode 0600). No server configured means the commands talk to this host's stack."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import tomllib

from yoloq.base.errors import UserError
from yoloq.settings import settings

SERVER_ENV = "YOLOQ_SERVER"
TOKEN_ENV = "YOLOQ_TOKEN"
FILE_MODE = 0o600


@dataclass(frozen=True)
class Server:
    """A yoloq API base URL (no `/v1`) and the bearer token that goes with it."""

    url: str
    token: str
    source: str  # where it came from, named in errors


def credentials_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "yoloq" / "credentials.toml"


def normal_url(url: str) -> str:
    """`http(s)://host:port` with no trailing slash; a bad URL is a one-line error."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or "://" == url[-3:]:
        raise UserError("server URL", f"{url!r} is not an http(s) URL", "write e.g. http://queue-host:4211")
    return url.removesuffix("/v1")


def configured_server() -> Server | None:
    """The server the commands should use, or None to use this host's stack."""
    url = (settings().server or "").strip()
    if url:
        token = (settings().token or "").strip() or _saved_token_for(normal_url(url))
        if not token:
            raise UserError(TOKEN_ENV, f"is not set for {SERVER_ENV}={url}",
                            f"export {TOKEN_ENV}=<your team token>, or run `yoloq login {url}`")
        return Server(normal_url(url), token, f"${SERVER_ENV}")
    saved = read_saved()
    if saved is None:
        return None
    token = (settings().token or "").strip() or saved.token
    return Server(saved.url, token, saved.source)


def read_saved() -> Server | None:
    path = credentials_path()
    if not path.exists():
        return None
    try:
        data = tomllib.loads(path.read_text())
        return Server(normal_url(str(data["url"])), str(data["token"]), str(path))
    except (OSError, tomllib.TOMLDecodeError, KeyError) as exc:
        raise UserError(str(path), f"cannot be read ({type(exc).__name__}: {exc})",
                        "run `yoloq login URL --token TOKEN` again, or `yoloq logout`") from None


def _saved_token_for(url: str) -> str | None:
    saved = read_saved()
    return saved.token if saved is not None and saved.url == url else None


def save(url: str, token: str) -> Path:
    """Write the credentials file, readable by its owner only (created 0600, never wider)."""
    path = credentials_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    body = f"url = {_toml_string(url)}\ntoken = {_toml_string(token)}\n"
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # an older tmp file may have had another mode
        os.write(fd, body.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def forget() -> bool:
    """Remove the saved credentials; True when there were some."""
    path = credentials_path()
    if not path.exists():
        return False
    path.unlink()
    return True


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

"""Reaching an engine, every step bounded: this machine's (DOCKER_HOST honoured) and a remote one
over `ssh://` (the SDK's paramiko transport). Owns SSH target parsing (~/.ssh/config, as the SDK
reads it), the bounded SSH probe run before the SDK is given the host, and why a remote engine
cannot be used (EngineUnavailable and its causes). `Connection` is the part of `Engine` that
opens, closes and describes the engine."""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
from dataclasses import dataclass
from typing import Any, Callable, TypeVar
from urllib.parse import urlsplit

from gpuenv.engine.common import quietly, short_reason, transport_errors
from gpuenv.errors import ToolError
from validate.text import safe_url

ENGINE_FIX = (
    "start the Docker engine (sudo systemctl start docker, or sudo scripts/install-docker.sh) "
    "or set DOCKER_HOST"
)
#: Seconds for the SDK's reads of the local engine (a call that streams nothing for this long
#: fails).
READ_TIMEOUT = 60
#: Seconds to reach a remote engine: the TCP connect, SSH banner, key exchange and login, and then
#: `docker version` over that connection, each within this limit.
CONNECT_TIMEOUT = 20

# Why a remote engine cannot be used (EngineUnavailable.cause); the fleet maps each to a status.
UNREACHABLE = "unreachable"
AUTH_REFUSED = "auth refused"
NO_DOCKER = "no docker"
ENGINE_NOT_ANSWERING = "engine not answering"


class EngineUnavailable(ToolError):
    """A remote engine cannot be used; `cause` says which step failed (UNREACHABLE, AUTH_REFUSED,
    NO_DOCKER, ENGINE_NOT_ANSWERING) so a fleet can report each in its own words."""

    def __init__(self, cause: str, message: str, *, fix: str | None = None) -> None:
        self.cause = cause
        super().__init__(message, fix=fix)


def _quiet_paramiko() -> None:
    """paramiko logs a traceback per failed connection from its transport thread, which Python's
    last-resort handler prints to stderr; its errors reach us as exceptions with their reason.
    A handler of its own that drops them (the SDK resets the logger's level on every connect, so
    a level alone does not hold)."""
    log = logging.getLogger("paramiko")
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())
    log.propagate = False


# ---------------------------------------------------------------- reaching an engine


@dataclass(frozen=True)
class SshTarget:
    """Where `ssh://user@host:port` really goes, after ~/.ssh/config (as the SDK reads it)."""

    alias: str
    hostname: str
    port: int
    username: str | None
    key_filename: Any = None
    proxy_command: str | None = None


def ssh_target(url: str) -> SshTarget:
    """Read ~/.ssh/config the way the SDK's paramiko transport does (HostName, Port, User,
    IdentityFile, ProxyCommand), so the bounded probe goes where the SDK will go."""
    import paramiko

    parts = urlsplit(url)
    alias = parts.hostname or ""
    params: dict[str, Any] = {"hostname": alias, "port": parts.port, "username": parts.username}
    config_file = os.path.expanduser("~/.ssh/config")
    proxy = None
    if os.path.exists(config_file):
        conf = paramiko.SSHConfig()
        with open(config_file) as handle:
            conf.parse(handle)
        host = conf.lookup(alias)
        proxy = host.get("proxycommand")
        params["hostname"] = host.get("hostname", alias)
        if parts.port is None and "port" in host:
            params["port"] = int(host["port"])
        if parts.username is None and "user" in host:
            params["username"] = host["user"]
        params["key_filename"] = host.get("identityfile")
    return SshTarget(
        alias,
        params["hostname"],
        int(params["port"] or 22),
        params["username"],
        params.get("key_filename"),
        proxy,
    )


def ssh_problem(target: SshTarget, err: BaseException, limit: float) -> EngineUnavailable:
    """The cause and the fix of a failed SSH connect (pure: the exception decides)."""
    name = type(err).__name__
    text = short_reason(err)
    where = f"{target.hostname}:{target.port}"
    keyscan = (
        f"ssh-keyscan -p {target.port} {target.hostname}"
        if target.port != 22
        else f"ssh-keyscan {target.hostname}"
    )
    if name == "BadHostKeyException":
        return EngineUnavailable(
            AUTH_REFUSED,
            f"SSH host key of {target.hostname} changed ({text})",
            fix="check the server, then fix its line in ~/.ssh/known_hosts",
        )
    if "known_hosts" in text:
        return EngineUnavailable(
            AUTH_REFUSED,
            f"SSH host key of {target.hostname} is unknown ({text})",
            fix=f"check it, then add it with {keyscan} >> ~/.ssh/known_hosts",
        )
    if (
        name in ("AuthenticationException", "BadAuthenticationType", "PasswordRequiredException")
        or "authentication methods" in text
    ):
        return EngineUnavailable(
            AUTH_REFUSED,
            f"SSH login to {where} as {target.username or 'this user'} refused ({text})",
            fix="give this user's key (ssh-copy-id, or IdentityFile in ~/.ssh/config)",
        )
    if isinstance(err, socket.gaierror):
        return EngineUnavailable(
            UNREACHABLE,
            f"cannot reach {target.hostname} over SSH: the name does not resolve ({text})",
            fix="check the host name (or its HostName in ~/.ssh/config)",
        )
    if isinstance(err, (TimeoutError, socket.timeout)) or "timed out" in text.lower():
        return EngineUnavailable(
            UNREACHABLE,
            f"cannot reach {where} over SSH: no answer within {limit:.0f}s",
            fix="the host is down or a firewall drops the packets; check it, or drop it from "
            "--hosts",
        )
    if "banner" in text.lower():
        return EngineUnavailable(
            UNREACHABLE,
            f"cannot reach {where} over SSH: no SSH greeting within {limit:.0f}s ({text})",
            fix="check that sshd runs on that port and is not overloaded",
        )
    if "refused" in text.lower() or "Unable to connect" in text:
        return EngineUnavailable(
            UNREACHABLE,
            f"cannot reach {where} over SSH: connection refused",
            fix="check that sshd runs there and the port is right",
        )
    return EngineUnavailable(
        UNREACHABLE,
        f"cannot reach {target.hostname} over SSH ({name}: {text})",
        fix="try ssh to it by hand to see why",
    )


#: Run over SSH before the SDK is given the host: `docker` must be on the login's PATH (the SDK
#: runs `docker system dial-stdio` there) and its engine must answer; prints the engine's API
#: version.
_REMOTE_PROBE = (
    "command -v docker >/dev/null 2>&1 || exit 127; exec docker version --format "
    "'{{.Server.APIVersion}}'"
)


def remote_engine_problem(
    target: SshTarget, status: int | None, out: str, err: str, limit: float
) -> EngineUnavailable | None:
    """Why the remote `docker version` did not give an API version (pure), or None when it did."""
    who = f"{target.username}@{target.hostname}" if target.username else target.hostname
    last = (err.strip().splitlines() or [""])[-1][:300]
    if status is None:
        return EngineUnavailable(
            ENGINE_NOT_ANSWERING,
            f"SSH to {who} works but its Docker engine did not answer within {limit:.0f}s",
            fix="the engine hangs: look at dockerd there (systemctl status docker, journalctl "
            "-u docker) and restart it",
        )
    if status == 127:
        return EngineUnavailable(
            NO_DOCKER,
            f"SSH to {who} works but there is no `docker` command on its PATH",
            fix="install Docker there (the SDK runs `docker system dial-stdio` over SSH), or "
            "put docker on that user's PATH",
        )
    if status == 0 and re.fullmatch(r"\d+\.\d+", out.strip()):
        return None
    if "permission denied" in err.lower():
        return EngineUnavailable(
            ENGINE_NOT_ANSWERING,
            f"SSH to {who} works but that user may not use its Docker engine ({last})",
            fix="add the user to the docker group there (sudo usermod -aG docker USER), then "
            "log in again",
        )
    return EngineUnavailable(
        ENGINE_NOT_ANSWERING,
        f"SSH to {who} works but its Docker engine does not answer "
        f"({last or f'docker version exited {status}'})",
        fix="start dockerd there (sudo systemctl start docker)",
    )


def bounded_call(
    action: Callable[[], Any], seconds: float, on_late: Callable[[Any], None]
) -> tuple[bool, Any]:
    """Run `action` in a daemon thread for at most `seconds`: (True, result) or (False, None).

    For the few SDK calls that take no timeout of their own; when one returns after we gave up,
    `on_late` gets its result (to close it) and the thread ends."""
    box: dict[str, Any] = {}
    gave_up = threading.Event()
    lock = threading.Lock()

    def run() -> None:
        try:
            value = action()
        except BaseException as err:  # handed to the caller
            box["error"] = err
            return
        with lock:
            if gave_up.is_set():
                on_late(value)
            else:
                box["value"] = value

    thread = threading.Thread(target=run, daemon=True, name="gpuenv-engine-connect")
    thread.start()
    thread.join(seconds)
    with lock:
        if thread.is_alive():
            gave_up.set()
            return False, None
    if "error" in box:
        raise box["error"]
    return True, box.get("value")


def _probe_remote(target: SshTarget, limit: float) -> str:
    """Log in over SSH with every step bounded, run `docker version` there; its API version."""
    import paramiko

    client = paramiko.SSHClient()
    client.load_system_host_keys()
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        try:
            client.connect(
                target.hostname,
                port=target.port,
                username=target.username,
                key_filename=target.key_filename,
                sock=paramiko.ProxyCommand(target.proxy_command) if target.proxy_command else None,
                timeout=limit,
                banner_timeout=limit,
                auth_timeout=limit,
                channel_timeout=limit,
            )
        except (paramiko.SSHException, OSError, EOFError) as err:
            raise ssh_problem(target, err, limit) from None
        try:
            _, stdout, stderr = client.exec_command(_REMOTE_PROBE, timeout=limit)
            channel = stdout.channel
            status = channel.recv_exit_status() if channel.status_event.wait(limit) else None
            out = stdout.read().decode("utf-8", "replace") if status is not None else ""
            err_text = stderr.read().decode("utf-8", "replace") if status is not None else ""
        except (paramiko.SSHException, OSError, EOFError) as err:
            raise EngineUnavailable(
                ENGINE_NOT_ANSWERING,
                f"SSH to {target.hostname} works but running docker there failed "
                f"({short_reason(err)})",
                fix="check that the user may run commands (no ForceCommand or restricted shell)",
            ) from None
        problem = remote_engine_problem(target, status, out, err_text, limit)
        if problem is not None:
            raise problem
        return out.strip()
    finally:
        client.close()


_C = TypeVar("_C", bound="Connection")  # Engine, when called on it


class Connection:
    """The part of `Engine` that opens, closes and describes one engine: one SDK client
    (docker.DockerClient) serves every call made of it."""

    def __init__(self, client: Any, where: str, *, remote: bool = False) -> None:
        self.client = client  # docker.DockerClient
        self.where = where
        self.remote = remote
        self._closed = False

    # ------------------------------------------------------------ construction

    @classmethod
    def local(cls: type[_C], timeout: float = READ_TIMEOUT) -> _C:
        """This machine's engine (DOCKER_HOST honoured): one per DOCKER_HOST and read timeout for
        the life of the process, pinged when first opened; a closed one is opened again.

        `timeout` is the SDK's read timeout: calls that stream large data (saving an image) need
        more.
        """
        key = (cls, os.environ.get("DOCKER_HOST"), timeout)
        with _LOCAL_LOCK:
            engine = _LOCAL.get(key)
            if engine is None or engine.closed:
                engine = _LOCAL[key] = cls._open_local(timeout)
            return engine

    @classmethod
    def _open_local(cls: type[_C], timeout: float) -> _C:
        import docker

        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        try:
            cli = docker.from_env(timeout=timeout)
            cli.ping()
        except (
            Exception
        ) as err:  # DockerException, or requests' connection errors that ping lets through
            raise ToolError(
                f"the Docker engine at {where} does not answer ({short_reason(err)})",
                fix=ENGINE_FIX,
            ) from None
        return cls(cli, where)

    @classmethod
    def connect(
        cls: type[_C],
        url: str,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
    ) -> _C:
        """The engine behind `ssh://user@host[:port]`, or EngineUnavailable with the step that
        failed.

        The SDK's paramiko connect takes no timeout and its constructor negotiates the API version
        with no limit of its own, so first a bounded SSH login of our own runs `docker version`
        there (unreachable, login refused, no docker, engine not answering each say so within
        `connect_timeout`), then the SDK is given that API version and its connect is bounded too.
        """
        import paramiko

        import docker

        _quiet_paramiko()
        target = ssh_target(url)
        version = _probe_remote(target, connect_timeout)

        def make() -> Any:
            return docker.DockerClient(
                base_url=url, version=version, timeout=read_timeout, use_ssh_client=False
            )

        try:
            done, client = bounded_call(
                make, connect_timeout, on_late=lambda late: quietly(late.close)
            )
        except (paramiko.SSHException, *transport_errors()) as err:
            raise ssh_problem(target, err, connect_timeout) from None
        except docker.errors.DockerException as err:
            raise EngineUnavailable(
                ENGINE_NOT_ANSWERING,
                f"the Docker engine behind {safe_url(url)} refused the SDK ({short_reason(err)})",
                fix="check dockerd there",
            ) from None
        if not done:
            raise EngineUnavailable(
                UNREACHABLE,
                f"cannot reach {target.hostname}:{target.port} over SSH: the SDK's connection "
                f"did not open within {connect_timeout:.0f}s",
                fix="check the host and its sshd",
            )
        engine = cls(client, url, remote=True)
        try:
            client.ping()
        except Exception as err:
            engine.close()
            raise EngineUnavailable(
                ENGINE_NOT_ANSWERING,
                f"SSH to {target.hostname} works but its Docker engine does not answer "
                f"the SDK ({short_reason(err)})",
                fix="look at dockerd there and restart it",
            ) from None
        return engine

    def close(self) -> None:
        """Drop the connection (and, for ssh://, the SSH session): every read in flight on it
        ends."""
        self._closed = True
        quietly(self.client.close)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ daemon

    def info(self) -> dict[str, Any]:
        """The engine's `docker info` record (version, runtimes, CDI spec folders, ...)."""
        return self.client.info()

    def runtimes(self) -> list[str]:
        """The container runtimes the engine knows (e.g. runc, nvidia)."""
        return sorted((self.info().get("Runtimes") or {}).keys())

    def architecture(self) -> str:
        """The engine's CPU architecture as `docker info` reports it (x86_64, aarch64): the
        image's."""
        return str(self.info().get("Architecture") or "unknown")


#: The local engines Connection.local opened, by (class, DOCKER_HOST, read timeout).
_LOCAL: dict[tuple[type, str | None, float], Any] = {}
_LOCAL_LOCK = threading.Lock()

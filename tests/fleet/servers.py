"""Real servers on loopback for the fleet tests: Debian's sshd, and a one-node Slurm (munge,
slurmctld, slurmd). Each is started in a temporary folder with generated keys and config,
listens on 127.0.0.1 only, and is stopped (by its own pid) when the context ends. The daemons run
in the foreground as children of the test process and die with it (childdeath.die_with), so a
pytest killed mid-run leaves none behind (tests/fleet/test_slurm_daemons_die.py).

Both need root (sshd's privilege separation, slurmd's job launch) and the packages of
scripts/install-test-servers.sh; `missing()` says exactly what is absent so tests skip with it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import dockercases
from childdeath import die_with

ROOT = Path(__file__).resolve().parents[2]

#: What `python -m validate` imports besides itself, copied from this venv (same Python 3.11 ABI
#: as the base image). No torch: the suite skips the framework checks with that reason.
SUITE_PACKAGES = (
    "_pytest",
    "pytest",
    "pluggy",
    "iniconfig",
    "packaging",
    "pygments",
    "yaml",
    "_yaml",
    "py.py",
    "pynvml.py",
)
SSHD = "/usr/sbin/sshd"


def missing(*programs: str) -> str | None:
    """Why these servers cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (sshd privilege separation / slurmd launching jobs)"
    absent = [p for p in programs if not (shutil.which(p) or Path(p).is_file())]
    if absent:
        return f"{', '.join(absent)} not installed: run scripts/install-test-servers.sh as root"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"server exited with {proc.returncode}: "
                f"{log.read_text()[-2000:] if log.exists() else ''}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(
        f"nothing listens on 127.0.0.1:{port} after {timeout}s: "
        f"{log.read_text()[-2000:] if log.exists() else ''}"
    )


def listening_addresses(pid: int) -> list[str]:
    """`ADDRESS:PORT` of every TCP socket process `pid` listens on, as `ss` reports them."""
    proc = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True)
    return [line.split()[3] for line in proc.stdout.splitlines() if f"pid={pid}," in line]


def _stop(pid: int, timeout: float = 10) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child (a daemon that forked): poll for it instead
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            done = 0
        if done:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------- sshd


@dataclass(frozen=True)
class SshServer:
    port: int
    user: str
    home: Path  # a HOME with .ssh/config (IdentityFile) and .ssh/known_hosts for this server
    key: Path
    pid: int = 0
    authorized_keys: Path | None = None

    @property
    def url(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True
    )


@contextmanager
def sshd(folder: Path, environment: dict[str, str] | None = None) -> Iterator[SshServer]:
    """sshd on 127.0.0.1:<free port>, key login only, for the current (root) user.

    The client side is a HOME folder of its own: ~/.ssh/config names the test's key and
    ~/.ssh/known_hosts the server's host key, which is how paramiko (the Docker SDK's SSH
    transport) finds both. Nothing of the real ~/.ssh is read or written. `environment` is set
    for every command the login runs (ForceCommand env ... "$SSH_ORIGINAL_COMMAND"), so a test
    can give the remote side no docker on PATH or a DOCKER_HOST that hangs.
    """
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o755)  # StrictModes would refuse a group/world-writable path to the keys
    host_key, user_key = folder / "ssh_host_ed25519_key", folder / "id_ed25519"
    _keygen(host_key, "gpuenv-test-host")
    _keygen(user_key, "gpuenv-test-user")
    authorized = folder / "authorized_keys"
    authorized.write_text(user_key.with_suffix(".pub").read_text())
    os.chmod(authorized, 0o600)
    port = free_port()
    config = folder / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"PidFile {folder / 'sshd.pid'}\nAuthorizedKeysFile {authorized}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nX11Forwarding no\n"
        "AllowTcpForwarding no\nPrintMotd no\nLogLevel VERBOSE\nSubsystem sftp internal-sftp\n"
        + (
            (
                "ForceCommand env "
                + " ".join(f"{k}={v}" for k, v in environment.items())
                + ' /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n'
            )
            if environment
            else ""
        )
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    log = folder / "sshd.log"
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config), "-E", str(log)],
        stdin=subprocess.DEVNULL,
        preexec_fn=die_with(os.getpid()),
    )
    try:
        wait_for_port(port, proc, log)
        home = folder / "home"
        (home / ".ssh").mkdir(parents=True)
        os.chmod(home / ".ssh", 0o700)
        pub = host_key.with_suffix(".pub").read_text().split()
        (home / ".ssh" / "known_hosts").write_text(
            "".join(f"[{name}]:{port} {pub[0]} {pub[1]}\n" for name in ("127.0.0.1", "localhost"))
        )
        (home / ".ssh" / "config").write_text(
            f"Host 127.0.0.1 localhost\n    IdentityFile {user_key}\n"
        )
        yield SshServer(
            port, os.environ.get("USER") or "root", home, user_key, proc.pid, authorized
        )
    finally:
        _stop(proc.pid)


# ---------------------------------------------------------------- Slurm


@dataclass(frozen=True)
class SlurmCluster:
    conf: Path
    node: str
    partition: str
    folder: Path
    pids: tuple[int, ...] = ()  # munged, slurmctld, slurmd
    nodes: tuple[str, ...] = ()  # every node's name (one slurmd each)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}


def _foreground(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """Start daemon `args` in the foreground (it does not fork away), a child of this process
    that dies with it (childdeath.die_with); its stdout and stderr go to `log`."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            args,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with(os.getpid()),
        )


def _wait_for_path(path: Path, proc: subprocess.Popen, log: Path, timeout: float = 10) -> None:
    """Until `path` exists (a daemon's socket); a daemon that exits first, or a timeout, raises
    with the end of its log."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            why = f"exited with {proc.returncode}" if proc.returncode is not None else "timed out"
            raise RuntimeError(f"{proc.args[0]} {why} before {path}:\n{log.read_text()[-1500:]}")
        time.sleep(0.05)


@contextmanager
def slurm_cluster(folder: Path, node: str | None = None, nodes: int = 1) -> Iterator[SlurmCluster]:
    """munged + slurmctld + slurmd for one node named after this host, on loopback ports.
    With `nodes` > 1, that many nodes NODE-1, NODE-2 ..., each its own slurmd on 127.0.0.1 with
    its own port (`slurmd -N`: Debian's slurm-wlm runs several slurmd on one host).

    cgroup-free (proctrack/linuxproc, task/none) so it runs inside containers and VMs, no
    accounting daemon (sacct answers "accounting storage is disabled"; gpuenv falls back to
    scontrol), all state under `folder`. Each daemon runs in the foreground as a child of this
    process and dies with it (a pytest killed mid-run leaves none behind: childdeath.die_with);
    stopped by pid in reverse order when the context ends.
    """
    node = node or socket.gethostname().split(".")[0]
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o755)
    munge = folder / "munge"
    munge.mkdir(mode=0o755)
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    for sub in ("state", "spool", "log"):
        (folder / sub).mkdir()
    socket_path = munge / "munge.socket"
    pids: list[int] = []
    ctld_port, slurmd_port = free_port(), free_port()
    names = [node] if nodes == 1 else [f"{node}-{i}" for i in range(1, nodes + 1)]
    each = "%n" if nodes > 1 else ""  # slurmd's own name in its spool, pid and log paths
    conf = folder / "slurm.conf"
    cpus = os.cpu_count() or 1
    conf.write_text(
        f"""# one-node test cluster written by tests/fleet/servers.py
ClusterName=gpuenvtest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
# Loopback only: slurmctld binds its SlurmctldHost address, slurmd and the clients (srun's I/O
# ports) the node's NodeAddr, instead of every address (slurm.conf(5), CommunicationParameters).
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket_path}
StateSaveLocation={folder / "state"}
SlurmdSpoolDir={folder / "spool"}{"/" + each if each else ""}
SlurmctldPidFile={folder / "slurmctld.pid"}
SlurmdPidFile={folder / f"slurmd{each}.pid"}
SlurmctldLogFile={folder / "log" / "slurmctld.log"}
SlurmdLogFile={folder / "log" / f"slurmd{each}.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MinJobAge=600
KillWait=2
OverTimeLimit=0
InactiveLimit=0
"""
        + "".join(
            f"NodeName={n} NodeAddr=127.0.0.1 "
            f"CPUs={cpus}{f' Port={free_port()}' if nodes > 1 else ''} State=UNKNOWN\n"
            for n in names
        )
        + f"PartitionName=debug Nodes={','.join(names)} Default=YES MaxTime=INFINITE State=UP\n"
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    log = folder / "log"
    try:
        munged = _foreground(
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={socket_path}",
                f"--key-file={key}",
                f"--log-file={munge / 'munged.log'}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--seed-file={munge / 'munged.seed'}",
            ],
            env,
            log / "munged.out",
        )
        pids.append(munged.pid)
        _wait_for_path(socket_path, munged, munge / "munged.log")  # slurmctld authenticates at once
        pids.append(
            _foreground(["slurmctld", "-D", "-f", str(conf), "-i"], env, log / "ctld.out").pid
        )
        for name in names:
            slurmd = ["slurmd", "-D", "-f", str(conf), *(["-N", name] if nodes > 1 else [])]
            pids.append(_foreground(slurmd, env, log / f"slurmd-{name}.out").pid)
        deadline = time.monotonic() + 30
        state = ""
        while time.monotonic() < deadline:
            proc = subprocess.run(
                ["sinfo", "--noheader", "--nodes", ",".join(names), "--format=%T"],
                env=env,
                capture_output=True,
                text=True,
            )
            state = " ".join(sorted(set(proc.stdout.split())))
            if state in ("idle", "mixed", "allocated"):
                break
            time.sleep(0.3)
        else:
            logs = "".join(f.read_text()[-1500:] for f in sorted(log.glob("*")))
            raise RuntimeError(
                f"node(s) {', '.join(names)} are {state or 'not reported'} after 30s:\n{logs}"
            )
        yield SlurmCluster(conf, names[0], "debug", folder, tuple(pids), tuple(names))
    finally:
        for pid in reversed(pids):
            _stop(pid)


def running_cluster(folder: Path, nodes: int = 1) -> Iterator[SlurmCluster]:
    """slurm_cluster with SLURM_CONF set in this process while it runs (a fixture's body)."""
    old = os.environ.get("SLURM_CONF")
    with slurm_cluster(folder, nodes=nodes) as cluster:
        os.environ["SLURM_CONF"] = str(cluster.conf)
        try:
            yield cluster
        finally:
            if old is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = old


# ---------------------------------------------------------------- registry


@contextmanager
def registry(folder: Path, pids: list[int] | None = None) -> Iterator[str]:
    """Debian's docker-registry (distribution 2.x) on 127.0.0.1:<free port>, storage in `folder`.
    Yields HOST:PORT; the engine trusts 127.0.0.0/8 registries without TLS."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = folder / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: "
        f"{folder / 'data'}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    log = folder / "registry.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["docker-registry", "serve", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with(os.getpid()),
        )
    if pids is not None:
        pids.append(proc.pid)
    try:
        wait_for_port(port, proc, log)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc.pid)


# ---------------------------------------------------------------- servers that stall


@contextmanager
def hung_unix_socket(path: Path) -> Iterator[Path]:
    """A unix socket that accepts every connection and never answers: a hung Docker engine
    (point DOCKER_HOST=unix://PATH at it). Closed, with every connection, when the context ends."""
    import threading

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)
    server.settimeout(0.2)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        thread.join(2)
        for conn in held:
            conn.close()
        server.close()


@dataclass(frozen=True)
class StallingRegistry:
    address: str  # 127.0.0.1:PORT
    reference: str  # ADDRESS/gpuenv/stall@sha256:... of an image whose one layer never finishes
    served: list  # (method, path) of every request, for the test to look at


@contextmanager
def stalling_registry(layer_bytes: int = 4 * 2**20) -> Iterator[StallingRegistry]:
    """A registry (distribution's HTTP API v2, the few calls a pull makes) on 127.0.0.1 that serves
    one image whose only layer stops after half its bytes and never sends the rest, as a registry
    or proxy that hangs mid-download does. Stopped, with every connection, when the context ends."""
    import gzip
    import hashlib
    import io
    import json
    import tarfile
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = os.urandom(layer_bytes)  # random: gzip cannot shrink it, so half is a real half
        info = tarfile.TarInfo("stall.bin")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    layer = gzip.compress(raw.getvalue(), compresslevel=1)
    sha = lambda b: "sha256:" + hashlib.sha256(b).hexdigest()  # noqa: E731
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [sha(raw.getvalue())]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": sha(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(layer),
                    "digest": sha(layer),
                }
            ],
        }
    ).encode()
    blobs = {sha(config): config, sha(layer): layer}
    stop = threading.Event()
    served: list = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(
            self, code: int, body: bytes, kind: str = "application/json", digest: str | None = None
        ) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            if digest:
                self.send_header("Docker-Content-Digest", digest)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            served.append((self.command, self.path))
            if self.path == "/v2/":
                return self._send(200, b"{}")
            if "/manifests/" in self.path:
                return self._send(
                    200,
                    manifest,
                    "application/vnd.docker.distribution.manifest.v2+json",
                    sha(manifest),
                )
            digest = self.path.rsplit("/", 1)[-1]
            if "/blobs/" in self.path and digest in blobs:
                body = blobs[digest]
                if body is not layer or self.command == "HEAD":
                    return self._send(200, body, "application/octet-stream", digest)
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                stop.wait()  # and never the rest
                return
            self._send(404, b'{"errors":[{"code":"NOT_FOUND"}]}')

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    address = f"127.0.0.1:{server.server_address[1]}"
    try:
        yield StallingRegistry(address, f"{address}/gpuenv/stall@{sha(manifest)}", served)
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


@contextmanager
def hanging_suite_image(base_image: str, repository: str, sleep_s: int) -> Iterator[str]:
    """A local image whose `python` only sleeps: a suite that never finishes, as on a wedged GPU
    (the real CPU suite finishes inside any limit short enough for a test). Tagged
    `repository:SESSION` and labelled as this session's (dockercases.session_containers); removed
    afterwards."""
    import io
    import tarfile

    import pytest

    from gpuenv.engine import Engine

    engine = Engine.local()

    if engine.image_info(base_image) is None:
        pytest.skip(
            f"the local base image {base_image} is missing: make it with "
            "scripts/make-test-base-image.sh"
        )
    dockerfile = (
        f"FROM {base_image}\nCOPY python /usr/local/bin/python\nUSER 1000:1000\n"
        f"{dockercases.session_label_line()}"
    ).encode()
    script = f"#!/bin/sh\nexec sleep {sleep_s}\n".encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, mode in (("Dockerfile", dockerfile, 0o644), ("python", script, 0o755)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    tag = f"{repository}:{dockercases.SESSION}"
    built = engine.build_image(
        buf, dockerfile="Dockerfile", tags=[tag], buildargs={}, progress=lambda _t: None
    )
    try:
        yield tag
    finally:
        dockercases.remove_image(engine, built.image.id)


class Run:
    """`invoke validate ...` in the background, its output read as it comes."""

    def __init__(self, args: list[str], home: Path, cwd: Path) -> None:
        env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT)}
        env.pop("SSH_AUTH_SOCK", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "invoke", "--search-root", str(ROOT), "validate", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(
                target=lambda s=stream, k=sink: k.extend(iter(s.readline, "")), daemon=True
            ).start()

    def wait_for(self, text: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if any(text in line for line in self.out):
                return
            time.sleep(0.1)
        raise AssertionError(
            f"never saw {text!r}: {''.join(self.out)[-2000:]} {''.join(self.err)[-2000:]}"
        )

    def stop(self, *signals: int, gap: float = 0.3) -> tuple[int, float]:
        started = time.monotonic()
        for n, sig in enumerate(signals):
            if n:
                time.sleep(gap)
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        seconds = time.monotonic() - started
        time.sleep(0.2)  # the reader threads take the last lines
        return code, seconds

"""Real servers on loopback for the fleet tests: Debian's sshd, and a one-node Slurm (munge,
slurmctld, slurmd). Each is started in a temporary folder with generated keys and config,
listens on 127.0.0.1 only, and is stopped (by its own pid) when the context ends.

Both need root (sshd's privilege separation, slurmd's job launch) and the packages of
scripts/install-test-servers.sh; `missing()` says exactly what is absent so tests skip with it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

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
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-2000:] if log.exists() else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s: {log.read_text()[-2000:] if log.exists() else ''}")


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

    @property
    def url(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)


@contextmanager
def sshd(folder: Path) -> Iterator[SshServer]:
    """sshd on 127.0.0.1:<free port>, key login only, for the current (root) user.

    The client side is a HOME folder of its own: ~/.ssh/config names the test's key and
    ~/.ssh/known_hosts the server's host key, which is how paramiko (the Docker SDK's SSH
    transport) finds both. Nothing of the real ~/.ssh is read or written.
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
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {folder / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {authorized}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nX11Forwarding no\nAllowTcpForwarding no\n"
        "PrintMotd no\nLogLevel VERBOSE\nSubsystem sftp internal-sftp\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    log = folder / "sshd.log"
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config), "-E", str(log)], stdin=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc, log)
        home = folder / "home"
        (home / ".ssh").mkdir(parents=True)
        os.chmod(home / ".ssh", 0o700)
        pub = host_key.with_suffix(".pub").read_text().split()
        (home / ".ssh" / "known_hosts").write_text("".join(f"[{name}]:{port} {pub[0]} {pub[1]}\n" for name in ("127.0.0.1", "localhost")))
        (home / ".ssh" / "config").write_text(f"Host 127.0.0.1 localhost\n    IdentityFile {user_key}\n")
        yield SshServer(port, os.environ.get("USER") or "root", home, user_key)
    finally:
        _stop(proc.pid)


# ---------------------------------------------------------------- Slurm


@dataclass(frozen=True)
class SlurmCluster:
    conf: Path
    node: str
    partition: str
    folder: Path

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}


def _daemon_pid(pidfile: Path, timeout: float = 10) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return int(pidfile.read_text().strip())
        except (OSError, ValueError):
            time.sleep(0.1)
    return None


@contextmanager
def slurm_cluster(folder: Path, node: str | None = None) -> Iterator[SlurmCluster]:
    """munged + slurmctld + slurmd for one node named after this host, on loopback ports.

    cgroup-free (proctrack/linuxproc, task/none) so it runs inside containers and VMs, no
    accounting daemon (sacct answers "accounting storage is disabled"; gpuenv falls back to
    scontrol), all state under `folder`. Stopped by pid in reverse order.
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
    conf = folder / "slurm.conf"
    cpus = os.cpu_count() or 1
    conf.write_text(f"""# one-node test cluster written by tests/fleet/servers.py
ClusterName=gpuenvtest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket_path}
StateSaveLocation={folder / 'state'}
SlurmdSpoolDir={folder / 'spool'}
SlurmctldPidFile={folder / 'slurmctld.pid'}
SlurmdPidFile={folder / 'slurmd.pid'}
SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}
SlurmdLogFile={folder / 'log' / 'slurmd.log'}
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
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
""")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        subprocess.run(["munged", "--force", f"--socket={socket_path}", f"--key-file={key}", f"--log-file={munge / 'munged.log'}",
                        f"--pid-file={munge / 'munged.pid'}", f"--seed-file={munge / 'munged.seed'}"], check=True, env=env)
        pid = _daemon_pid(munge / "munged.pid")
        if pid:
            pids.append(pid)
        subprocess.run(["slurmctld", "-f", str(conf), "-i"], check=True, env=env)
        pid = _daemon_pid(folder / "slurmctld.pid")
        if pid:
            pids.append(pid)
        subprocess.run(["slurmd", "-f", str(conf)], check=True, env=env)
        pid = _daemon_pid(folder / "slurmd.pid")
        if pid:
            pids.append(pid)
        deadline = time.monotonic() + 30
        state = ""
        while time.monotonic() < deadline:
            proc = subprocess.run(["sinfo", "--noheader", "--nodes", node, "--format=%T"], env=env, capture_output=True, text=True)
            state = proc.stdout.strip()
            if state in ("idle", "mixed", "allocated"):
                break
            time.sleep(0.3)
        else:
            logs = "".join((folder / "log" / f).read_text()[-1500:] for f in ("slurmctld.log", "slurmd.log") if (folder / "log" / f).exists())
            raise RuntimeError(f"node {node} is {state or 'not reported'} after 30s:\n{logs}")
        yield SlurmCluster(conf, node, "debug", folder)
    finally:
        for pid in reversed(pids):
            _stop(pid)


# ---------------------------------------------------------------- registry


@contextmanager
def registry(folder: Path) -> Iterator[str]:
    """Debian's docker-registry (distribution 2.x) on 127.0.0.1:<free port>, storage in `folder`.
    Yields HOST:PORT; the engine trusts 127.0.0.0/8 registries without TLS."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = folder / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {folder / 'data'}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    log = folder / "registry.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc, log)
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc.pid)

"""MooncakeService: a real mooncake_master plus one long-lived mooncake_client on loopback.

Invariants: every listening address we choose is 127.0.0.1 on a port picked by binding
127.0.0.1:0; the service is ready only when the master reports the storage segment mounted
(`master_total_capacity_bytes` > 0 on its metrics port), so a first put cannot fail for
lack of space; both processes are stopped by their own PIDs (terminate, then kill) on exit,
and their logs go to one file.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from gpu_backend.l3.mooncake import PACKAGE

HOST = "127.0.0.1"


class MooncakeUnavailable(RuntimeError):
    """The Mooncake binaries or their system libraries are not installed."""


@dataclass(frozen=True)
class MooncakeBinaries:
    master: Path
    client: Path


def find_binaries() -> MooncakeBinaries:
    """The mooncake_master/mooncake_client executables (package dir first, then PATH)."""
    found: dict[str, Path] = {}
    spec = importlib.util.find_spec("mooncake")
    pkg_dir = Path(spec.origin).parent if spec and spec.origin else None
    for name in ("mooncake_master", "mooncake_client"):
        candidate = pkg_dir / name if pkg_dir else None
        if candidate is not None and candidate.is_file():
            found[name] = candidate
        elif (which := shutil.which(name)) is not None:
            found[name] = Path(which)
    missing = [n for n in ("mooncake_master", "mooncake_client") if n not in found]
    if missing:
        raise MooncakeUnavailable(f"{', '.join(missing)} not found: pip install {PACKAGE}")
    if ctypes.util.find_library("ibverbs") is None:
        raise MooncakeUnavailable("libibverbs.so.1 not found (the Mooncake binaries link it): "
                                  "apt-get install -y libibverbs1")
    return MooncakeBinaries(found["mooncake_master"], found["mooncake_client"])


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class MooncakeService:
    """Context manager running master + storage client; `master_address` is for MooncakeL3."""

    def __init__(self, segment_bytes: int = 256 << 20, log_path: str | os.PathLike[str] | None
                 = None, ready_timeout_s: float = 20.0) -> None:
        self.segment_bytes = segment_bytes
        self.ready_timeout_s = ready_timeout_s
        self.log_path = Path(log_path) if log_path else Path(
            tempfile.mkstemp(prefix="mooncake-", suffix=".log")[1])
        self.master_port = self.metrics_port = self.client_port = 0
        self.startup_s = 0.0
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def master_address(self) -> str:
        return f"{HOST}:{self.master_port}"

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def env(self) -> dict[str, str]:
        """Client-side environment: SGLang's variables pointing at this service."""
        return {"MOONCAKE_MASTER": self.master_address,
                "MOONCAKE_TE_META_DATA_SERVER": "P2PHANDSHAKE",
                "MOONCAKE_GLOBAL_SEGMENT_SIZE": "0", "MOONCAKE_PROTOCOL": "tcp"}

    def start(self) -> MooncakeService:
        find_binaries()
        t0 = time.monotonic()
        self.master_port, self.metrics_port, self.client_port = (free_port() for _ in range(3))
        env = self._env()
        log = self.log_path.open("ab")
        try:
            self._start_master(env, log)
            self._start_storage(env, log)
        except BaseException:
            self.stop()
            raise
        finally:
            log.close()
        self.startup_s = time.monotonic() - t0
        return self

    def _master_argv(self) -> list[str]:
        return [str(find_binaries().master), f"--rpc_address={HOST}",
                f"--rpc_port={self.master_port}", f"--metrics_host={HOST}",
                f"--metrics_port={self.metrics_port}", "--enable_metric_reporting=false"]

    def _start_master(self, env: dict[str, str], log: object) -> None:
        self._spawn(self._master_argv(), env, log)
        self._wait(lambda: self._capacity() is not None, "master metrics endpoint")

    def _start_storage(self, env: dict[str, str], log: object) -> None:
        self._spawn([str(find_binaries().client), f"--host={HOST}", f"--port={self.client_port}",
                     f"--global_segment_size={self.segment_bytes}", "--local_buffer_size=0",
                     "--metadata_server=P2PHANDSHAKE", "--protocol=tcp",
                     f"--master_server_address={self.master_address}"], env, log)
        self._wait(lambda: (self._capacity() or 0) > 0, "storage segment mount")

    @property
    def master_process(self) -> subprocess.Popen[bytes]:
        return self._procs[0]

    @property
    def storage_process(self) -> subprocess.Popen[bytes]:
        return self._procs[-1]

    def kill_storage(self) -> None:
        """SIGKILL the storage process (its segment and the pages in it are gone)."""
        self.storage_process.kill()
        self.storage_process.wait(timeout=5)

    def restart_master(self) -> None:
        """Start a fresh master on the same ports after the old one died (its metadata is
        gone; the storage process registers its segment again by itself)."""
        if self.master_process.poll() is None:
            raise RuntimeError("the master is still running: kill it first")
        with self.log_path.open("ab") as log:
            self._procs[0] = subprocess.Popen(self._master_argv(), env=self._env(),
                                              stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT)
            self._wait(lambda: (self._capacity() or 0) > 0, "storage segment re-mount")

    def restart_storage(self) -> None:
        """Start a fresh storage process (empty segment) after :meth:`kill_storage`."""
        if self.storage_process.poll() is None:
            raise RuntimeError("the storage process is still running: kill_storage() first")
        self._procs.pop()
        self.client_port = free_port()
        with self.log_path.open("ab") as log:
            self._start_storage(self._env(), log)

    @staticmethod
    def _env() -> dict[str, str]:
        return {**os.environ, "MC_LOG_LEVEL": "ERROR", "GLOG_minloglevel": "2"}

    def _spawn(self, argv: list[str], env: dict[str, str], log: object) -> None:
        self._procs.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT))

    def _capacity(self) -> int | None:
        """master_total_capacity_bytes from the metrics port, None if not answering."""
        try:
            url = f"http://{HOST}:{self.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=1.0) as resp:
                text = resp.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("master_total_capacity_bytes "):
                return int(float(line.split()[1]))
        return 0

    def _wait(self, ready: object, what: str) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} while "
                                       f"waiting for {what}; log: {self.log_path}\n"
                                       f"{self.log_tail()}")
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.05)
        raise TimeoutError(f"Mooncake {what} not ready after {self.ready_timeout_s} s; "
                           f"log: {self.log_path}\n{self.log_tail()}")

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the storage client first, then the master, each by PID (a paused one is
        resumed first, so that it can take the signal)."""
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        self._procs.clear()

    def __enter__(self) -> MooncakeService:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

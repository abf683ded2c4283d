"""A real multi-process Dask cluster on loopback, for tests.

``dask scheduler`` and ``dask worker`` run as separate subprocesses (each in
its own process group, so a nanny's worker child goes down with it), bound to
127.0.0.1.  Every wait is bounded; :meth:`MultiprocessCluster.close` kills
everything it started and is safe to call twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["MultiprocessCluster"]


class MultiprocessCluster:
    """Start a scheduler and ``n_workers`` workers as subprocesses.

    Parameters
    ----------
    workdir : path
        Where the scheduler file and the processes' logs go.
    n_workers : int
        Workers, each with one thread and a 1 GB memory limit.
    timeout : float
        Seconds allowed for the scheduler file to appear and for all workers
        to connect.
    own_cwds : bool
        If true, each process runs in its own empty directory
        ``workdir/<name>-cwd`` (as processes on other machines would: a
        relative path means something else in each); otherwise all run in
        ``workdir``.
    """

    def __init__(self, workdir, n_workers=2, *, timeout=60.0, own_cwds=False):
        self.workdir = Path(workdir)
        self.n_workers = n_workers
        self.timeout = timeout
        self.own_cwds = own_cwds
        self.scheduler_file = self.workdir / "s.json"
        self.procs = []
        self.address = None

    # -------------------------------------------------------------- processes
    def _spawn(self, name, args):
        log = open(self.workdir / f"{name}.log", "wb")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        cwd = self.workdir
        if self.own_cwds:
            cwd = self.workdir / f"{name}-cwd"
            cwd.mkdir(exist_ok=True)
        proc = subprocess.Popen([sys.executable, "-m", "dask", *args], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, start_new_session=True)
        log.close()
        self.procs.append((name, proc))
        return proc

    def logs(self):
        """The tail of every process's log, for failure messages."""
        out = []
        for name, _ in self.procs:
            path = self.workdir / f"{name}.log"
            text = path.read_text(errors="replace") if path.exists() else ""
            out.append(f"--- {name} ---\n{text[-2000:]}")
        return "\n".join(out)

    def _check_alive(self):
        for name, proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with status {proc.returncode}\n{self.logs()}")

    def start(self):
        """Start the scheduler, then the workers; wait until all are connected."""
        from distributed import Client

        self._spawn("scheduler", ["scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--scheduler-file", str(self.scheduler_file),
                                  "--no-dashboard"])
        deadline = time.monotonic() + self.timeout
        while self.address is None:
            self._check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no scheduler file after {self.timeout}s\n{self.logs()}")
            try:
                self.address = json.loads(self.scheduler_file.read_text())["address"]
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                time.sleep(0.1)
        if not self.address.startswith("tcp://127.0.0.1:"):
            raise RuntimeError(f"the scheduler is not on loopback: {self.address}")
        for i in range(self.n_workers):
            self._spawn(f"worker{i}", ["worker", "--scheduler-file", str(self.scheduler_file),
                                       "--host", "127.0.0.1", "--nthreads", "1",
                                       "--memory-limit", "1GB", "--no-dashboard",
                                       "--name", f"worker{i}"])
        remaining = max(deadline - time.monotonic(), 1.0)
        with Client(self.address, timeout=remaining, set_as_default=False) as client:
            try:
                client.wait_for_workers(self.n_workers, timeout=remaining)
            except TimeoutError as e:
                self._check_alive()
                raise TimeoutError(f"{e}\n{self.logs()}") from None
        return self

    def close(self):
        """Terminate every process group started here (then kill what remains)."""
        procs, self.procs = self.procs, []
        for _, proc in reversed(procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for _, proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
            # a nanny's worker child lives in the same group: make sure it is gone too
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

"""A one-node SLURM cluster on this machine for the cluster tests: Debian's slurm-wlm and munge
(installed by scripts/setup-test-system.sh), its configuration written where SLURM's commands
and the jobs' own `srun` look for it (/etc/slurm/slurm.conf; the SLURM executor's job step
drops SLURM_CONF from a job's environment), its state, logs and munge socket in a scratch
folder, every daemon run in the foreground under this process and stopped by its pid, and
SLURM's own record of each finished job (jobcomp/filetxt) read back.

The node's CPUs and memory are the machine's (`slurmd -C`); no accounting daemon runs, so
Snakemake's SLURM executor asks `squeue` for job states and finished jobs stay listed for
MinJobAge seconds. proctrack/linuxproc and task/none: no cgroups here (see
docs/clusters-and-caches.md)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

CONFIG = Path("/etc/slurm/slurm.conf")
MARK = "# infbench test cluster: written and removed by tests/slurm.py"
PARTITION = "debug"
ACCOUNT = "infbench-test"
DAEMONS = ("munged", "slurmctld", "slurmd")


def unavailable() -> str | None:
    """Why this machine cannot run the test cluster, or None."""
    missing = [name for name in (*DAEMONS, "sbatch", "squeue", "scancel") if not shutil.which(name)]
    if missing:
        return f"SLURM is not installed ({', '.join(missing)} missing): run scripts/setup-test-system.sh as root"
    if not Path("/etc/munge/munge.key").exists():
        return "munge has no key (/etc/munge/munge.key): reinstall munge, or run mungekey as root"
    if os.geteuid() != 0:
        return "the test cluster's daemons and /etc/slurm/slurm.conf need root"
    if CONFIG.exists() and MARK not in CONFIG.read_text():
        return f"{CONFIG} belongs to a SLURM installation of this machine's own; the tests leave it alone"
    return None


def node_line() -> str:
    """This machine as one node: `slurmd -C`'s CPUs and memory, less 1 GiB for the daemons."""
    probed = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    cpus = int(re.search(r"CPUs=(\d+)", probed).group(1))
    memory = int(re.search(r"RealMemory=(\d+)", probed).group(1)) - 1024
    return f"NodeName={socket.gethostname()} CPUs={cpus} RealMemory={memory} State=UNKNOWN"


class SlurmCluster:
    def __init__(self, folder: Path):
        self.folder = folder
        self.jobcomp = folder / "jobcomp.txt"
        self.processes: dict[str, subprocess.Popen] = {}

    def configuration(self) -> str:
        folder = self.folder
        return "\n".join(
            [
                MARK,
                "ClusterName=infbench-test",
                f"SlurmctldHost={socket.gethostname()}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                f"AuthInfo=socket={folder}/munge.sock",
                f"StateSaveLocation={folder}/state",
                f"SlurmdSpoolDir={folder}/spool",
                f"SlurmctldPidFile={folder}/slurmctld.pid",
                f"SlurmdPidFile={folder}/slurmd.pid",
                f"SlurmctldLogFile={folder}/slurmctld.log",
                f"SlurmdLogFile={folder}/slurmd.log",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "JobCompType=jobcomp/filetxt",
                f"JobCompLoc={self.jobcomp}",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core_Memory",
                "MinJobAge=900",
                "KillWait=10",
                "ReturnToService=2",
                node_line(),
                f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )

    def start(self) -> None:
        for name in ("state", "spool"):
            (self.folder / name).mkdir(parents=True, exist_ok=True)
        CONFIG.parent.mkdir(parents=True, exist_ok=True)
        CONFIG.write_text(self.configuration())
        folder = self.folder
        commands = {
            "munged": [
                "munged",
                "--foreground",
                "--force",
                f"--socket={folder}/munge.sock",
                "--key-file=/etc/munge/munge.key",
                f"--pid-file={folder}/munged.pid",
                f"--log-file={folder}/munged.log",
                f"--seed-file={folder}/munge.seed",
            ],  # fmt: skip
            "slurmctld": ["slurmctld", "-D", "-i"],
            "slurmd": ["slurmd", "-D"],
        }
        for name, command in commands.items():
            log = open(folder / f"{name}.out", "w")  # noqa: SIM115 (closed with the process)
            self.processes[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            if name == "munged":
                self.wait(lambda: (folder / "munge.sock").exists(), "munged's socket", 20)
        self.wait(lambda: self.node_state() == "idle", "the node to be idle", 60)

    def wait(self, ready, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            dead = [name for name, process in self.processes.items() if process.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(
                    f"{path.name}: {path.read_text()[-1500:]}"
                    for path in sorted(self.folder.glob("*.out")) + sorted(self.folder.glob("*.log"))
                )
                raise RuntimeError(f"the test cluster never got {what} (exited: {dead or 'none'}):\n{logs}")
            time.sleep(0.5)

    def node_state(self) -> str:
        result = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
        return result.stdout.strip() if result.returncode == 0 else ""

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "--user=root"], capture_output=True)
        for name in reversed(DAEMONS):
            process = self.processes.get(name)
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if CONFIG.exists() and MARK in CONFIG.read_text():
            CONFIG.unlink()

    def finished_jobs(self) -> dict[int, dict[str, str]]:
        """SLURM's own record of every finished job: {job id: {field: value}} (jobcomp/filetxt)."""
        if not self.jobcomp.exists():
            return {}
        jobs = {}
        for line in self.jobcomp.read_text().splitlines():
            fields = dict(re.findall(r"(\w+)=(\S*)", line))
            jobs[int(fields["JobId"])] = fields
        return jobs

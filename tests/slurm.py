"""A one-node SLURM cluster on this machine for the cluster tests: Debian's slurm-wlm and munge
(installed by scripts/setup-test-system.sh), its configuration written where SLURM's commands
and the jobs' own `srun` look for it (/etc/slurm/slurm.conf; the SLURM executor's job step
drops SLURM_CONF from a job's environment), its state, logs and munge socket in a scratch
folder, every daemon run in the foreground under this process and stopped by its pid, and
SLURM's own record of each finished job (jobcomp/filetxt) read back.

The node is this machine (`slurmd -C`'s name and CPUs, its memory less 1 GiB), reached at
127.0.0.1 on ports of its own; no accounting daemon runs, so
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
# Not SLURM's default ports (6817, 6818), so that a SLURM of the machine's own is never reached.
PORTS = {"SlurmctldPort": 16817, "SlurmdPort": 16818}
# The serve rule asks for 16,000 MB; the node must hold it beside the daemons.
NEEDED_MB = 17000


def unavailable() -> str | None:
    """Why this machine cannot run the test cluster, or None."""
    os.environ["PATH"] += ":/usr/sbin:/sbin"  # the daemons live there; not on every user's PATH
    missing = [name for name in (*DAEMONS, "sbatch", "squeue", "scancel") if not shutil.which(name)]
    if missing:
        return (
            f"SLURM is not installed ({', '.join(missing)} missing): run scripts/setup-test-system.sh cluster as root"
        )
    if os.geteuid() != 0:
        return "the test cluster's daemons and /etc/slurm/slurm.conf need root"
    if not Path("/etc/munge/munge.key").exists():
        return "munge has no key (/etc/munge/munge.key): reinstall munge, or run mungekey as root"
    if CONFIG.exists() and MARK not in CONFIG.read_text():
        return f"{CONFIG} belongs to a SLURM installation of this machine's own; the tests leave it alone"
    if (memory := node()["RealMemory"]) < NEEDED_MB:
        return f"the node would have {memory} MB; the serve rule's jobs need {NEEDED_MB}"
    busy = [f"{key} {port}" for key, port in PORTS.items() if not port_is_free(port)]
    if busy:
        return f"the test cluster's ports are taken ({', '.join(busy)}): a test cluster left running?"
    return None


def node() -> dict:
    """This machine as one node: `slurmd -C`'s name and CPUs, its memory less 1 GiB for the daemons."""
    probed = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    return {
        "NodeName": re.search(r"NodeName=(\S+)", probed).group(1),
        "CPUs": int(re.search(r"CPUs=(\d+)", probed).group(1)),
        "RealMemory": int(re.search(r"RealMemory=(\d+)", probed).group(1)) - 1024,
    }


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


class SlurmCluster:
    def __init__(self, folder: Path):
        self.folder = folder
        self.jobcomp = folder / "jobcomp.txt"
        self.processes: dict[str, subprocess.Popen] = {}

    def configuration(self) -> str:
        folder, this = self.folder, node()
        return "\n".join(
            [
                MARK,
                "ClusterName=infbench-test",
                f"SlurmctldHost={this['NodeName']}(127.0.0.1)",
                *(f"{key}={port}" for key, port in PORTS.items()),
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
                f"NodeName={this['NodeName']} NodeAddr=127.0.0.1 CPUs={this['CPUs']} "
                f"RealMemory={this['RealMemory']} State=UNKNOWN",
                f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )

    def start(self) -> None:
        for name in ("state", "spool"):
            (self.folder / name).mkdir(parents=True, exist_ok=True)
        CONFIG.parent.mkdir(parents=True, exist_ok=True)
        CONFIG.write_text(self.configuration())
        os.environ.pop("SLURM_CONF", None)  # every command and job reads CONFIG, never another cluster's
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
            "slurmctld": ["slurmctld", "-D"],
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

    def queue(self) -> list[str]:
        result = subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True)
        return result.stdout.split("\n")[:-1] if result.returncode == 0 else []

    def node_state(self) -> str:
        result = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
        return result.stdout.strip() if result.returncode == 0 else ""

    def stop(self) -> None:
        """Cancel every job and wait for the queue to empty (job steps outlive slurmd), then
        stop the daemons by pid and remove the configuration."""
        subprocess.run(["scancel", "--full", "--user=root"], capture_output=True)
        deadline = time.monotonic() + 40  # KillWait (10 s) and a margin
        while time.monotonic() < deadline and self.queue():
            time.sleep(0.5)
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

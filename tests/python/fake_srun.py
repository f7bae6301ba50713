"""Starts N copies of COMMAND as `srun --ntasks N` would on one node: each with Slurm's
variables (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_ID, SLURM_JOB_NODELIST,
SLURM_JOB_NUM_NODES) and nothing of weftrun's or torchrun's. Exits with the first non-zero
status, or 0.

    fake_srun.py N COMMAND...
"""
import os
import subprocess
import sys

n, command = int(sys.argv[1]), sys.argv[2:]
base = {k: v for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                     "MASTER_PORT") and not k.startswith(("OMPI_", "PMI", "WEFT_"))}
base.update(SLURM_NTASKS=str(n), SLURM_JOB_ID=str(40000 + os.getpid() % 20000),
            SLURM_JOB_NODELIST="node01", SLURM_JOB_NUM_NODES="1")
procs = [subprocess.Popen(command, env={**base, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)})
         for r in range(n)]
codes = [p.wait(timeout=60) for p in procs]
sys.exit(next((c for c in codes if c != 0), 0))

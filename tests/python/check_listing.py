"""Runs the chapter's listing 16.6 on the weft backend as its reader would, with three
processes started by LAUNCHER (weftrun's, mpirun's or fake_srun.py's command line up to the
script, the interpreter included), and checks that it prints the chapter's output in any
order (the ranks race to print; mpirun may even join two ranks' lines):

    check_listing.py LISTING LAUNCHER...
"""
import re
import subprocess
import sys

listing, launcher = sys.argv[1], sys.argv[2:]
run = subprocess.run([*launcher, listing], capture_output=True, text=True, timeout=60)
sys.stderr.write(run.stderr)
got = sorted(re.findall(r"Process \d+ received tensor: \d+\.\d", run.stdout))
want = sorted([f"Process {r} received tensor: 123.0" for r in range(3)] +
              [f"Process {r} received tensor: 3.0" for r in range(3)])
print("\n".join(got))
if run.returncode != 0 or got != want:
    print(f"FAILED: exit {run.returncode}; expected\n" + "\n".join(want))
    sys.exit(1)

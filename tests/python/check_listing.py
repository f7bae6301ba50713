"""Runs the chapter's listing 16.6 on the weft backend as its reader would, and checks that
it prints the chapter's output (in any order, as the ranks race to print):

    check_listing.py WEFTRUN PYTHON LISTING
"""
import subprocess
import sys

weftrun, python, listing = sys.argv[1:4]
run = subprocess.run([weftrun, "--nproc-per-node", "3", python, listing], capture_output=True,
                     text=True, timeout=60)
sys.stderr.write(run.stderr)
got = sorted(line.split("] ", 1)[1] for line in run.stdout.splitlines() if "] " in line)
want = sorted([f"Process {r} received tensor: 123.0" for r in range(3)] +
              [f"Process {r} received tensor: 3.0" for r in range(3)])
print("\n".join(got))
if run.returncode != 0 or got != want:
    print(f"FAILED: exit {run.returncode}; expected\n" + "\n".join(want))
    sys.exit(1)

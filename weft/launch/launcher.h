// weftrun's engine: starts a job's workers on this node, relays their output, forwards
// signals, stops the group when one worker fails and restarts it while restarts remain; with
// --recover in-place or elastic, starts a worker killed by a signal again alone (each counts as a
// restart), and with elastic lets the others go on without it once no restart is left.
// docs/LAUNCHER.md describes the behaviour from the user's side.
#pragma once

#include "weft/launch/launch_options.h"
#include "weft/launch/rendezvous.h"

namespace weft::launch {

// Runs the job to its end and returns the exit code weftrun should exit with:
//   0        every worker exited 0 (in the last attempt);
//   code     a worker exited with `code` and no restarts were left;
//   128+sig  a worker was killed by signal `sig` and no restarts were left, or weftrun
//            itself received SIGINT, SIGTERM, SIGHUP or SIGQUIT (`sig`), which it forwarded
//            to every worker.
// On node 0 (options.node_rank == 0) it first starts the store with `rendezvous.start` and
// keeps it running across restarts. A worker killed by a signal that it starts again in place
// or leaves dead is first recorded dead in the store (on other nodes through
// `rendezvous.connect`); a death that cannot be recorded is said and passed over. Workers' stdout
// and stderr lines are written to fd 1 and 2, prefixed with "[rank] "; weftrun's own messages go to
// fd 2, prefixed "weftrun: ".
//
// Blocks until the workers are gone, never longer than a worker's own run plus
// options.stop_grace plus a few seconds: stopped workers are killed with SIGKILL once the
// grace has passed. While it runs it handles SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGCHLD
// and ignores SIGPIPE, restoring the previous dispositions before it returns. Workers are forked
// children of the calling thread and die with it (PR_SET_PDEATHSIG), so call it from a
// thread that outlives the job (weftrun calls it from main). Not reentrant: one call per
// process at a time.
//
// Throws weft::InvalidArgument (ProgramNotFound) for bad options before anything starts,
// and weft::SystemError or the factory's error when the store or a worker cannot be
// started; workers already started are then killed.
int launch(const LaunchOptions& options, const Rendezvous& rendezvous);

}  // namespace weft::launch

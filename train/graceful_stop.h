// SIGTERM handling of train/train: the first SIGTERM asks training to stop after the current step
// (what ddprun / torchrun send to the survivors when a worker dies, and what schedulers send before
// preemption); a second SIGTERM exits at once. Stopping after the step, rather than dying inside it, lets
// a survivor whose step fails because a peer was lost print its error (naming the lost rank) instead of
// vanishing silently.
//
// Before the step loop first asks (GracefulStopRequested), nobody would see a request: a SIGTERM then
// (during start-up, data loading or the rendezvous, which can wait DDP_TIMEOUT_S for absent peers) exits
// the process at once with 128 + SIGTERM. Nothing has been trained, so nothing is lost.
#ifndef DDP_TRAIN_GRACEFUL_STOP_H_
#define DDP_TRAIN_GRACEFUL_STOP_H_

namespace ddp {

// Blocks SIGTERM in the calling thread and starts a thread that waits for it. Call first thing in
// main(), before any other thread exists (so that every later thread inherits the blocked mask and no
// system call anywhere is interrupted) and before the rendezvous. Idempotent.
void InstallGracefulStop();

// True once a SIGTERM arrived (false when InstallGracefulStop was never called). The first call marks
// that the step loop polls for requests: from then on a SIGTERM requests a stop instead of exiting.
// Thread-safe.
bool GracefulStopRequested();

}  // namespace ddp

#endif  // DDP_TRAIN_GRACEFUL_STOP_H_

// The straggler wait: in data-parallel training every rank's step ends with collectives that need every
// rank, so each step runs at the pace of its slowest rank. Pure functions.
//
// Note [Straggler wait]
// After a step's last all-reduce the ranks are in step; then each computes the rest of the step (the
// optimizer and the loop: other_s), the next forward and the backward on its own, and its compute time
// varies from step to step (the machine's noise, other tenants, the OS) with a standard deviation
// sigma that a trace measures (ComputeProfile::step_jitter_s). Modelling each rank's time as independent
// normal noise that accumulates like a random walk over the compute, the slowest of p ranks reaches a
// point `fraction` of the way through its compute sigma * sqrt(fraction) * E[max of p standard normals]
// later than the average rank: an all-reduce launched there starts that much later. At the end of
// backward (fraction ~1) that is 0.56 sigma for 2 ranks, 1.03 sigma for 4, 2.51 sigma for 100 and
// 3.24 sigma for 1024: why a job that scales well on 8 ranks can lose several percent at 1024 with the
// same links. Independence overstates the wait where the ranks' noise is shared (one machine's load
// slowing all of them alike).
#ifndef DDP_SIM_STRAGGLER_H_
#define DDP_SIM_STRAGGLER_H_

namespace ddp {
namespace sim {

// E[max(Z_1..Z_n)] for n independent standard normal Z (0 for n = 1; 1/sqrt(pi) for n = 2), by numerical
// integration to about 1e-6. Thread-safe. REQUIRES: n >= 1.
double ExpectedMaxOfStandardNormals(int n);

// How much later than the average rank the slowest of `world_size` ranks reaches `fraction` (0..1) of
// its compute, when one rank's whole compute varies with standard deviation `jitter_s` (Note [Straggler
// wait]). REQUIRES: world_size >= 1, jitter_s >= 0.
double StragglerDelay(double jitter_s, int world_size, double fraction);

}  // namespace sim
}  // namespace ddp

#endif  // DDP_SIM_STRAGGLER_H_

// Which CPU this process runs on, as /proc/cpuinfo names it: for benchmark reports and for records that
// must tell "the same machine kind" from "another one" (a checkpoint's bf16 kernel, train/autocast_record.h).
#ifndef DDP_BASE_CPU_IDENTITY_H_
#define DDP_BASE_CPU_IDENTITY_H_

#include <string>

namespace ddp {

// The first processor's "model name" ("AMD EPYC", "Intel(R) Xeon(R) Processor"), or "unknown CPU" where
// /proc/cpuinfo has none. Model names are marketing text: two different CPUs may share one.
std::string CpuModelName();

// The first processor's vendor, family and model, then its model name:
// "AuthenticAMD family 26 model 2 (AMD EPYC)". Two CPUs of one microarchitecture give the same text (the
// stepping and the flags are left out; the kernels this project picks depend on family and model). Fields
// /proc/cpuinfo lacks read "?" ("? family ? model ? (unknown CPU)" where it is absent).
std::string CpuIdentity();

}  // namespace ddp

#endif  // DDP_BASE_CPU_IDENTITY_H_

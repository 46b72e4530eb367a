// What the elastic end-to-end tests share: ddprun + train command lines, a bounded job run, the sample log.
#ifndef DDP_TRAIN_ELASTIC_TEST_JOBS_H_
#define DDP_TRAIN_ELASTIC_TEST_JOBS_H_

#include <string>
#include <vector>

#include "testing/process.h"
#include "train/sample_log.h"

namespace ddp {

// `ddprun --master_port=0 <launcher_flags> train/train <train_flags>`, both from the runfiles.
std::vector<std::string> Job(const std::vector<std::string>& launcher_flags,
                             const std::vector<std::string>& train_flags);

// Runs `argv` with DDP_TIMEOUT_S=30 and then `env`, under a 240 s limit.
ProcessResult RunJob(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});

// The entries of the sample log at `path`; a test failure (and no entries) when it cannot be read.
std::vector<SampleLogEntry> ReadLog(const std::string& path);

// The flags every elastic test run over `backend` shares: one epoch of the mlp, a constant learning rate.
std::vector<std::string> Common(const std::string& backend);

}  // namespace ddp

#endif  // DDP_TRAIN_ELASTIC_TEST_JOBS_H_

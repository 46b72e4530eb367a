// What an elastic replacement must share with the job it joins, checked before it registers.
//
// Note [Replacement fit check]
// A replacement (docs/elastic.md) is started apart from the job: by ddprun on its node, from that node's
// command line and copy of the data. The job's own ranks compared both at start-up (Note [Train settings
// agreement]; CheckRanksLoadedTheSameData), but a replacement meets them only inside a new generation, where
// a mismatch could only end the whole job: the survivors would have lost their run to a bad replacement.
// So rank 0 of an --elastic job publishes the job's profile at start-up, in the launcher's store
// (ElasticJobProfileKey): the settings every rank must share (SettingsToAgree) and what it loaded
// (DescribeLoadedData). A replacement reads it after loading its data and before it registers; where its
// own profile differs it exits naming the first difference, e.g.
//   this replacement cannot join the job: it loaded different data: the job (rank 0): /data (50000
//   training, 10000 test images; data 1f..); this replacement: /mnt/data (49990 training, ...; data 7a..)
// and the survivors never see it: ddprun counts it as a lost worker (and replaces it again while
// --max_restarts allows), and the job trains on at its smaller world size. A job that published no profile
// (none within the wait: not an --elastic train/train job of this version) is not compared here; the
// replacement says so and registers, and the generation it joins compares the settings as before.
//
// Example (the replacement's side):
//   DDP_ASSIGN_OR_RETURN(const bool compared,
//                        CheckReplacementFitsJob(store, ProfileOf(config, loaded), absl::Seconds(10)));
#ifndef DDP_TRAIN_JOB_PROFILE_H_
#define DDP_TRAIN_JOB_PROFILE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/rank_agreement.h"
#include "store/store.h"
#include "train/state_agreement.h"
#include "train/train_config.h"

namespace ddp {

// The settings SettingsToAgree(config) lists and the data a process loaded.
struct JobProfile {
  std::vector<AgreedField> settings;
  LoadedData data;
};

// `config`'s profile with `data`. REQUIRES: ValidateConfig(config) is OK.
JobProfile ProfileOf(const TrainConfig& config, const LoadedData& data);

// The profile as bytes (store/byte_codec.h) and back; Decode fails (DataLoss, naming the store key) on
// bytes that are not a whole encoded profile.
std::string EncodeJobProfile(const JobProfile& profile);
absl::StatusOr<JobProfile> DecodeJobProfile(const std::string& bytes);

// OK when `replacement` equals `job`; otherwise a FailedPrecondition naming the first setting that
// differs ("this replacement cannot join the job: its --lr is 0.02, the job's 0.01") or, the settings
// being equal, the two data descriptions. Pure.
absl::Status CompareWithJob(const JobProfile& job, const JobProfile& replacement);

// Rank 0's side: writes `profile` under ElasticJobProfileKey in `store` (the attempt's namespace, as
// DistributedContext::store). Errors: the store's, prefixed with what was being written.
absl::Status PublishJobProfile(Store& store, const JobProfile& profile);

// How long a replacement waits for the job's profile: rank 0 wrote it at start-up, long before any
// worker was lost, so only a job that publishes none makes it wait this long.
inline constexpr absl::Duration kJobProfileWait = absl::Seconds(10);

// The line a replacement prints when the job published no profile within the wait.
std::string NoJobProfileNote();

// The replacement's side: reads the job's profile from `store`, waiting at most `wait`, and compares it
// with `mine` (CompareWithJob). Returns true when compared and equal, false when the job published none
// within `wait`; the mismatch, a malformed profile and the store's other errors as errors.
absl::StatusOr<bool> CheckReplacementFitsJob(Store& store, const JobProfile& mine, absl::Duration wait);

}  // namespace ddp

#endif  // DDP_TRAIN_JOB_PROFILE_H_

#include "train/job_profile.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "store/byte_codec.h"
#include "store/store_keys.h"
#include "train/settings_agreement.h"

namespace ddp {
namespace {

constexpr uint32_t kFormat = 1;             // the encoding below; another value is refused
constexpr size_t kMaxPartBytes = 1 << 20;   // the encoded settings, a data key or description

absl::Status Malformed(absl::string_view why) {
  return absl::DataLossError(
      absl::StrCat("the elastic job's profile (store key ", ElasticJobProfileKey(), ") is malformed: ", why));
}

}  // namespace

JobProfile ProfileOf(const TrainConfig& config, const LoadedData& data) {
  return JobProfile{SettingsToAgree(config), data};
}

std::string EncodeJobProfile(const JobProfile& profile) {
  std::string out;
  AppendU32(&out, kFormat);
  AppendBytes(&out, EncodeAgreedFields(profile.settings));
  AppendBytes(&out, profile.data.key);
  AppendBytes(&out, profile.data.detail);
  return out;
}

absl::StatusOr<JobProfile> DecodeJobProfile(const std::string& bytes) {
  ByteReader reader(bytes);
  uint32_t format = 0;
  if (!reader.ReadU32(&format)) return Malformed("too short for its format number");
  if (format != kFormat) return Malformed(absl::StrCat("format ", format, ", expected ", kFormat));
  std::string settings;
  JobProfile profile;
  if (!reader.ReadBytes(kMaxPartBytes, &settings) || !DecodeAgreedFields(settings, &profile.settings)) {
    return Malformed("the settings are cut short");
  }
  if (!reader.ReadBytes(kMaxPartBytes, &profile.data.key) ||
      !reader.ReadBytes(kMaxPartBytes, &profile.data.detail)) {
    return Malformed("the data description is cut short");
  }
  if (reader.remaining() != 0) return Malformed(absl::StrCat(reader.remaining(), " bytes after the end"));
  return profile;
}

absl::Status CompareWithJob(const JobProfile& job, const JobProfile& replacement) {
  constexpr absl::string_view kRefused = "this replacement cannot join the job: ";
  const size_t shared = std::min(job.settings.size(), replacement.settings.size());
  for (size_t i = 0; i < shared; ++i) {
    const AgreedField &theirs = job.settings[i], &mine = replacement.settings[i];
    if (theirs.name != mine.name) {
      return absl::FailedPreconditionError(absl::StrCat(kRefused, "its settings include ", mine.name,
                                                        " where the job's include ", theirs.name));
    }
    if (theirs.value != mine.value) {
      return absl::FailedPreconditionError(
          absl::StrCat(kRefused, "its ", mine.name, " is ", mine.value, ", the job's ", theirs.value));
    }
  }
  if (job.settings.size() != replacement.settings.size()) {
    return absl::FailedPreconditionError(absl::StrCat(kRefused, "it shares ", replacement.settings.size(),
                                                      " settings, the job ", job.settings.size()));
  }
  if (job.data.key != replacement.data.key) {
    return absl::FailedPreconditionError(
        absl::StrCat(kRefused, "it loaded different data: the job (rank 0): ", job.data.detail,
                     "; this replacement: ", replacement.data.detail));
  }
  return absl::OkStatus();
}

absl::Status PublishJobProfile(Store& store, const JobProfile& profile) {
  const absl::Status set = store.Set(ElasticJobProfileKey(), EncodeJobProfile(profile));
  if (set.ok()) return set;
  return absl::Status(set.code(),
                      absl::StrCat("publishing the elastic job's profile for replacements: ", set.message()));
}

std::string NoJobProfileNote() {
  return absl::StrCat("elastic: the job published no profile (store key ", ElasticJobProfileKey(),
                      ") within ", absl::FormatDuration(kJobProfileWait),
                      "; this replacement's data is not compared with the job's, and its settings are "
                      "compared once it is admitted");
}

absl::StatusOr<bool> CheckReplacementFitsJob(Store& store, const JobProfile& mine, absl::Duration wait) {
  const absl::StatusOr<std::string> published = store.Get(ElasticJobProfileKey(), wait);
  if (absl::IsDeadlineExceeded(published.status())) return false;
  if (!published.ok()) {
    return absl::Status(published.status().code(),
                        absl::StrCat("reading the elastic job's profile: ", published.status().message()));
  }
  absl::StatusOr<JobProfile> job = DecodeJobProfile(*published);
  if (!job.ok()) return job.status();
  const absl::Status compared = CompareWithJob(*job, mine);
  if (!compared.ok()) return compared;
  return true;
}

}  // namespace ddp

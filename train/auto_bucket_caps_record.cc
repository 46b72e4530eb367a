#include "train/auto_bucket_caps_record.h"

#include <climits>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {
namespace {

using Json = nlohmann::ordered_json;

// "\"auto_bucket_caps.<field>\" <problem>", the way every error about the record names its field.
std::string FieldProblem(const char* field, const std::string& problem) {
  return absl::StrCat("\"", kAutoBucketCapsStateName, ".", field, "\" ", problem);
}

// What is wrong with the values of `record`, named by field; empty when nothing is.
std::string RecordProblem(const AutoBucketCapsRecord& record) {
  for (const auto& [field, mib] : {std::pair<const char*, double>{"first_bucket_cap_mib", record.first_bucket_cap_mib},
                                   std::pair<const char*, double>{"bucket_cap_mib", record.bucket_cap_mib}}) {
    if (!(mib >= 0)) return FieldProblem(field, absl::StrCat("must be >= 0 (MiB) or \"inf\", got ", mib));
  }
  if (record.world_size < 1) return FieldProblem("world_size", absl::StrCat("must be >= 1, got ", record.world_size));
  if (record.backend.empty()) return FieldProblem("backend", "must name a backend, got \"\"");
  return "";
}

// A cap in MiB as the record stores it: a number, or "inf" for no cap.
Json CapJson(double mib) { return std::isinf(mib) ? Json("inf") : Json(mib); }

// Fails decoding: a DataLoss error naming the file and the problem.
absl::Status Malformed(const std::string& where, const std::string& problem) {
  return absl::DataLossError(absl::StrCat("checkpoint file ", where, ": ", problem));
}

// record[field] as a cap in MiB (a number or "inf"), into `*mib`.
absl::Status GetCap(const std::string& where, const Json& record, const char* field, double* mib) {
  const auto it = record.find(field);
  if (it == record.end()) return Malformed(where, FieldProblem(field, "is missing"));
  if (it->is_number()) {
    *mib = it->get<double>();
  } else if (it->is_string() && it->get<std::string>() == "inf") {
    *mib = std::numeric_limits<double>::infinity();
  } else {
    return Malformed(where, FieldProblem(field, absl::StrCat("must be a number (MiB) or \"inf\", got ", it->dump())));
  }
  return absl::OkStatus();
}

// record[field], when present, as a step time in seconds (a number >= 0) into `*seconds`.
absl::Status GetOptionalSeconds(const std::string& where, const Json& record, const char* field, double* seconds) {
  const auto it = record.find(field);
  if (it == record.end()) return absl::OkStatus();
  if (!it->is_number() || !(it->get<double>() >= 0)) {
    return Malformed(where, FieldProblem(field, absl::StrCat("must be a number >= 0 (seconds), got ", it->dump())));
  }
  *seconds = it->get<double>();
  return absl::OkStatus();
}

// record["world_size"] and record["backend"] into `*parsed`.
absl::Status GetGroup(const std::string& where, const Json& record, AutoBucketCapsRecord* parsed) {
  const auto world = record.find("world_size");
  if (world == record.end() || !world->is_number_integer() || world->get<int64_t>() < 1 ||
      world->get<int64_t>() > INT_MAX) {
    const std::string got = world == record.end() ? "nothing" : world->dump();
    return Malformed(where, FieldProblem("world_size", absl::StrCat("must be an integer >= 1, got ", got)));
  }
  parsed->world_size = static_cast<int>(world->get<int64_t>());
  const auto backend = record.find("backend");
  if (backend == record.end() || !backend->is_string()) {
    const std::string got = backend == record.end() ? "nothing" : backend->dump();
    return Malformed(where, FieldProblem("backend", absl::StrCat("must be a string, got ", got)));
  }
  parsed->backend = backend->get<std::string>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> EncodeAutoBucketCapsRecord(const AutoBucketCapsRecord& record) {
  if (const std::string problem = RecordProblem(record); !problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", problem));
  }
  Json j = {{"first_bucket_cap_mib", CapJson(record.first_bucket_cap_mib)},
            {"bucket_cap_mib", CapJson(record.bucket_cap_mib)},
            {"world_size", record.world_size},
            {"backend", record.backend}};
  if (record.predicted_step_s >= 0) j["predicted_step_s"] = record.predicted_step_s;
  if (record.measured_step_s >= 0) j["measured_step_s"] = record.measured_step_s;
  return j.dump();
}

absl::StatusOr<AutoBucketCapsRecord> DecodeAutoBucketCapsRecord(absl::string_view text, const std::string& where) {
  const Json record = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) {
    return Malformed(where, absl::StrCat("\"", kAutoBucketCapsStateName, "\" must be an object, got ",
                                         record.is_discarded() ? std::string(text) : record.dump()));
  }
  AutoBucketCapsRecord parsed;
  DDP_RETURN_IF_ERROR(GetCap(where, record, "first_bucket_cap_mib", &parsed.first_bucket_cap_mib));
  DDP_RETURN_IF_ERROR(GetCap(where, record, "bucket_cap_mib", &parsed.bucket_cap_mib));
  DDP_RETURN_IF_ERROR(GetGroup(where, record, &parsed));
  DDP_RETURN_IF_ERROR(GetOptionalSeconds(where, record, "predicted_step_s", &parsed.predicted_step_s));
  DDP_RETURN_IF_ERROR(GetOptionalSeconds(where, record, "measured_step_s", &parsed.measured_step_s));
  if (const std::string problem = RecordProblem(parsed); !problem.empty()) return Malformed(where, problem);
  return parsed;
}

}  // namespace ddp

#include "train/data_record.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace ddp {
namespace {

using Json = nlohmann::ordered_json;

// Fails decoding: a DataLoss error naming the file, the field and the problem.
absl::Status Malformed(const std::string& where, const std::string& field, const std::string& problem) {
  return absl::DataLossError(
      absl::StrCat("checkpoint file ", where, ": \"", kDataStateName, ".", field, "\" ", problem));
}

// "--random_crop_padding=4 --random_flip", or "no crops or flips".
std::string AugmentationWords(const DataRecord& record) {
  if (record.random_crop_padding == 0 && !record.random_flip) return "no crops or flips";
  std::string words;
  if (record.random_crop_padding > 0)
    words = absl::StrCat("--random_crop_padding=", record.random_crop_padding);
  if (record.random_flip) absl::StrAppend(&words, words.empty() ? "" : " ", "--random_flip");
  return words;
}

}  // namespace

DataRecord CurrentDataRecord(const TrainConfig& config) {
  return DataRecord{config.dataset, config.random_crop_padding, config.random_flip};
}

std::string EncodeDataRecord(const DataRecord& record) {
  return Json({{"dataset", record.dataset},
               {"random_crop_padding", record.random_crop_padding},
               {"random_flip", record.random_flip}})
      .dump();
}

absl::StatusOr<DataRecord> DecodeDataRecord(absl::string_view text, const std::string& where) {
  const Json record = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) {
    return absl::DataLossError(absl::StrCat("checkpoint file ", where, ": \"", kDataStateName,
                                            "\" must be an object, got ",
                                            record.is_discarded() ? std::string(text) : record.dump()));
  }
  DataRecord parsed;
  const auto dataset = record.find("dataset");
  if (dataset == record.end() || !dataset->is_string() || dataset->get<std::string>().empty()) {
    return Malformed(where, "dataset", dataset == record.end() ? "is missing" : "must be a non-empty string");
  }
  parsed.dataset = dataset->get<std::string>();
  const auto padding = record.find("random_crop_padding");
  if (padding == record.end() || !padding->is_number_integer() || padding->get<int64_t>() < 0) {
    return Malformed(where, "random_crop_padding",
                     padding == record.end() ? "is missing" : "must be an integer >= 0");
  }
  parsed.random_crop_padding = padding->get<int64_t>();
  const auto flip = record.find("random_flip");
  if (flip == record.end() || !flip->is_boolean()) {
    return Malformed(where, "random_flip", flip == record.end() ? "is missing" : "must be true or false");
  }
  parsed.random_flip = flip->get<bool>();
  return parsed;
}

absl::Status CheckResumeData(const std::string& text, const std::string& source, const TrainConfig& config,
                             std::string* note) {
  note->clear();
  if (text.empty()) return absl::OkStatus();
  DDP_ASSIGN_OR_RETURN(const DataRecord saved, DecodeDataRecord(text, source + "/manifest.json"));
  const DataRecord now = CurrentDataRecord(config);
  if (saved.dataset != now.dataset) {
    return absl::FailedPreconditionError(absl::StrCat("--resume: the checkpoint in ", source,
                                                      " trained on --dataset=", saved.dataset, ", not ",
                                                      now.dataset, ": resume with --dataset=", saved.dataset,
                                                      ", or start from its weights with --init_from=", source,
                                                      "/model.safetensors and a new --checkpoint_dir"));
  }
  if (saved.random_crop_padding != now.random_crop_padding || saved.random_flip != now.random_flip) {
    *note = absl::StrCat("--resume: the checkpoint's steps drew ", AugmentationWords(saved),
                         ", this run draws ", AugmentationWords(now), ": the run continues, not bit for bit");
  }
  return absl::OkStatus();
}

}  // namespace ddp

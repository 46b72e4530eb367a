// What data a checkpoint's steps trained on: the data set and the crops and flips drawn from it.
//
// Note [Data record]
// Every checkpoint keeps a "data" extra state (JSON: dataset, random_crop_padding, random_flip). --resume
// reads it before loading anything and, on every rank:
//   - refuses a checkpoint of another --dataset: its weights would go on training on images they were not
//     trained on, silently where the two data sets share a shape (MNIST and Fashion-MNIST do); fine-tuning
//     on another data set starts from --init_from, which takes any weights of the right shapes (with
//     --init_from_exclude=fc. a head of another class count keeps its initial values);
//   - lets other crops and flips continue (a deliberate change of recipe), and rank 0 says the run is then
//     not bit for bit the one the checkpoint's run would have been.
// A checkpoint without the record (written before it existed, or by another program) resumes as before.
#ifndef DDP_TRAIN_DATA_RECORD_H_
#define DDP_TRAIN_DATA_RECORD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "train/train_config.h"

namespace ddp {

// The extra-state name of the record: "data".
inline constexpr char kDataStateName[] = "data";

// The data the steps before a checkpoint trained on.
struct DataRecord {
  std::string dataset;              // --dataset
  int64_t random_crop_padding = 0;  // --random_crop_padding
  bool random_flip = false;         // --random_flip
};

// The record of a run under `config`.
DataRecord CurrentDataRecord(const TrainConfig& config);

// The record as JSON text: {"dataset": ..., "random_crop_padding": ..., "random_flip": ...}.
std::string EncodeDataRecord(const DataRecord& record);

// Parses EncodeDataRecord's text read from `where` (the file it came from). A malformed record is a
// DataLoss error "checkpoint file <where>: \"data.<field>\" <problem>".
absl::StatusOr<DataRecord> DecodeDataRecord(absl::string_view text, const std::string& where);

// What --resume does with the record `text` of the checkpoint at `source` ("": none, OK): a
// FailedPrecondition naming both data sets when config.dataset differs, e.g.
//   "--resume: the checkpoint in /ck/step-200 trained on --dataset=fashion_mnist, not mnist: ..."
// else OK, with `*note` set to the line rank 0 prints when the crops or flips differ ("" when they agree).
absl::Status CheckResumeData(const std::string& text, const std::string& source, const TrainConfig& config,
                             std::string* note);

}  // namespace ddp

#endif  // DDP_TRAIN_DATA_RECORD_H_

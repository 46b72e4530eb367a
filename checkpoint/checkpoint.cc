#include "checkpoint/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "io/file.h"
#include "base/fnv1a.h"
#include "nn/safetensors.h"
#include "base/check.h"
#include "tensor/dtype.h"

// Note [Checkpoint atomicity]
// A reader must never see a half-written checkpoint, and a failed write must not damage the last good
// one. So a save never writes inside an existing checkpoint: it fills dir/.tmp-step-<N>, fsyncs each
// file and then the directory (so the names are durable), renames the directory to dir/step-<N> (a
// single atomic rename on POSIX file systems) and fsyncs `dir`. Only then is dir/latest replaced, by
// writing dir/latest.tmp, fsyncing it and renaming it over dir/latest. A crash at any point leaves
// dir/latest naming a complete checkpoint (or absent); a leftover .tmp-step-<N> is removed by the next
// save of that step. The manifest is the last file written and carries a checksum of every file and
// every tensor, so a reader also detects damage that happened after the save (bit rot, truncation by a
// full disk, a copy interrupted by hand) and can name the tensor that was hit. The file operations
// themselves (durable and atomic writes, verified reads) are io/file.h's.

namespace ddp {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr char kFormat[] = "ddp-checkpoint-1";
constexpr char kModelFile[] = "model.safetensors";
constexpr char kOptimizerFile[] = "optimizer.safetensors";
constexpr char kManifestFile[] = "manifest.json";
constexpr char kLatestFile[] = "latest";
constexpr char kStepPrefix[] = "step-";

uint64_t Fnv1a64(absl::string_view bytes) { return ddp::Fnv1a64(bytes.data(), bytes.size()); }

std::string Hex(uint64_t value) { return absl::StrFormat("%016x", value); }

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

absl::Status DataLoss(const std::string& file, const std::string& message) {
  return absl::DataLossError(absl::StrCat("checkpoint file ", file, ": ", message));
}

// ------------------------------------------------------------------------------------- extra state

constexpr char kExtraStateKey[] = "extra_state";

// Manifest fields that held two layers' state before extra state had names, read as extra_state entries
// of the same names: DDP's bucket order (a string, as it is; empty: none) and --bucket_cap_mb=auto's
// record (a JSON object, as its text).
constexpr char kLegacyBucketOrderField[] = "ddp_bucket_order";
constexpr char kLegacyAutoCapsField[] = "auto_bucket_caps";

// The manifest's extra state into `*extra`: the legacy fields, then the "extra_state" object of strings.
absl::Status ReadExtraState(const std::string& path, const Json& body, std::map<std::string, std::string>* extra) {
  if (const auto order = body.find(kLegacyBucketOrderField); order != body.end()) {
    if (!order->is_string()) return DataLoss(path, absl::StrCat("\"", kLegacyBucketOrderField, "\" must be a string"));
    if (!order->get<std::string>().empty()) (*extra)[kLegacyBucketOrderField] = order->get<std::string>();
  }
  if (const auto record = body.find(kLegacyAutoCapsField); record != body.end()) {
    (*extra)[kLegacyAutoCapsField] = record->dump();
  }
  const auto state = body.find(kExtraStateKey);
  if (state == body.end()) return absl::OkStatus();
  if (!state->is_object()) {
    return DataLoss(path, absl::StrCat("\"", kExtraStateKey, "\" must be an object, got ", state->dump()));
  }
  for (const auto& [name, value] : state->items()) {
    if (name.empty() || !value.is_string()) {
      return DataLoss(path, absl::StrCat("\"", kExtraStateKey, ".", name, "\" must be a named string, got ",
                                         value.dump()));
    }
    (*extra)[name] = value.get<std::string>();
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------------------------------ manifest

// Per-tensor entries {name: {dtype, shape, fnv1a64}} of a parsed safetensors image.
Json TensorEntries(const NamedTensors& tensors) {
  Json entries = Json::object();
  for (const auto& [name, tensor] : tensors) {
    const absl::string_view data(static_cast<const char*>(tensor.raw_data()), tensor.nbytes());
    entries[name] = {
        {"dtype", DTypeName(tensor.dtype())}, {"shape", tensor.shape()}, {"fnv1a64", Hex(Fnv1a64(data))}};
  }
  return entries;
}

absl::StatusOr<Json> FileEntry(const std::string& name, const std::string& bytes) {
  absl::StatusOr<SafetensorsContents> parsed = ParseSafetensors(bytes, name);
  if (!parsed.ok())
    return absl::InternalError(
        absl::StrCat("checkpoint: re-reading ", name, ": ", parsed.status().message()));
  const FileFingerprint fingerprint = FingerprintOf(bytes);
  return Json{{"size", fingerprint.size},
              {"fnv1a64", Hex(fingerprint.fnv1a64)},
              {"tensors", TensorEntries(parsed->tensors)}};
}

absl::StatusOr<std::string> BuildManifest(const Checkpoint& checkpoint, const std::string& model_bytes,
                                          const std::string& optimizer_bytes) {
  Json body = Json::object();
  body["format"] = kFormat;
  body["step"] = checkpoint.step;
  body["epoch"] = checkpoint.epoch;
  body["sampler"] = checkpoint.sampler.ToText();
  body["rng_state"] = checkpoint.rng_state;
  if (!checkpoint.extra_state.empty()) {
    Json extra = Json::object();
    for (const auto& [name, value] : checkpoint.extra_state) extra[name] = value;
    body[kExtraStateKey] = extra;
  }
  body["optimizer_step_count"] = checkpoint.optimizer.step_count;
  DDP_ASSIGN_OR_RETURN(Json model_entry, FileEntry(kModelFile, model_bytes));
  DDP_ASSIGN_OR_RETURN(Json optimizer_entry, FileEntry(kOptimizerFile, optimizer_bytes));
  body["files"] = {{kModelFile, model_entry}, {kOptimizerFile, optimizer_entry}};
  const Json manifest = {{"body", body}, {"fnv1a64", Hex(Fnv1a64(body.dump()))}};
  return manifest.dump(1) + "\n";
}

// A parsed, self-consistent manifest.
struct Manifest {
  Json body;
};

absl::StatusOr<Manifest> ParseManifest(const std::string& path, const std::string& text) {
  const Json manifest = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object()) return DataLoss(path, "not a JSON object (corrupt)");
  const auto body = manifest.find("body");
  const auto sum = manifest.find("fnv1a64");
  if (body == manifest.end() || !body->is_object() || sum == manifest.end() || !sum->is_string()) {
    return DataLoss(path, "missing \"body\" or \"fnv1a64\" (corrupt)");
  }
  if (sum->get<std::string>() != Hex(Fnv1a64(body->dump()))) {
    return DataLoss(path, "the manifest's own checksum does not match its contents (corrupt)");
  }
  const auto format = body->find("format");
  if (format == body->end() || !format->is_string() || format->get<std::string>() != kFormat) {
    return DataLoss(path, absl::StrCat("unknown format (expected \"", kFormat, "\")"));
  }
  return Manifest{*body};
}

// body[key] as an integer / string, or an error naming the key.
absl::Status GetInt(const std::string& path, const Json& j, const char* key, int64_t* out) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer())
    return DataLoss(path, absl::StrCat("\"", key, "\" missing or not an integer"));
  *out = it->get<int64_t>();
  return absl::OkStatus();
}
absl::Status GetString(const std::string& path, const Json& j, const char* key, std::string* out) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string())
    return DataLoss(path, absl::StrCat("\"", key, "\" missing or not a string"));
  *out = it->get<std::string>();
  return absl::OkStatus();
}

// ------------------------------------------------------------------------------------- data files

// The first tensor whose entry in `actual` differs from `expected` (missing, extra, dtype, shape or
// checksum), described for an error message; empty when they agree.
std::string FirstTensorDifference(const Json& expected, const Json& actual) {
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    const auto found = actual.find(it.key());
    if (found == actual.end()) return absl::StrCat("tensor \"", it.key(), "\" is missing");
    for (const char* field : {"dtype", "shape", "fnv1a64"}) {
      if (found->value(field, Json()) != it.value().value(field, Json())) {
        return absl::StrCat("tensor \"", it.key(), "\": ", field, " is ", found->value(field, Json()).dump(),
                            ", the manifest says ", it.value().value(field, Json()).dump());
      }
    }
  }
  for (auto it = actual.begin(); it != actual.end(); ++it) {
    if (expected.find(it.key()) == expected.end())
      return absl::StrCat("unexpected tensor \"", it.key(), "\"");
  }
  return "";
}

// The size and checksum the manifest's `entry` records for the file `name`.
absl::StatusOr<FileFingerprint> RecordedFingerprint(const std::string& manifest_path, const Json& entry,
                                                    const std::string& name) {
  int64_t size = 0;
  std::string checksum;
  DDP_RETURN_IF_ERROR(GetInt(manifest_path, entry, "size", &size));
  DDP_RETURN_IF_ERROR(GetString(manifest_path, entry, "fnv1a64", &checksum));
  FileFingerprint fingerprint;
  if (size < 0 || !absl::SimpleHexAtoi(checksum, &fingerprint.fnv1a64)) {
    return DataLoss(manifest_path, absl::StrCat("bad size or checksum for ", name));
  }
  fingerprint.size = static_cast<uint64_t>(size);
  return fingerprint;
}

// The file at `path` failed its verified read with `damage` (size or checksum); adds which tensor was
// hit when its header still parses.
absl::Status NameDamagedTensor(const std::string& path, const absl::Status& damage, const Json& expected_tensors) {
  const absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return damage;
  const absl::StatusOr<SafetensorsContents> parsed = ParseSafetensors(*bytes, path);
  // ParseSafetensors names the file and, where it can, the tensor.
  std::string where(parsed.status().message());
  if (parsed.ok()) where = FirstTensorDifference(expected_tensors, TensorEntries(parsed->tensors));
  if (where.empty()) where = "the damage is in the header";
  return absl::DataLossError(absl::StrCat("checkpoint file ", damage.message(), "; ", where));
}

// Reads dir/name, verified against the size and checksum its manifest entry records; returns its
// tensors.
absl::StatusOr<SafetensorsContents> ReadVerifiedFile(const std::string& dir, const std::string& name,
                                                     const Manifest& manifest,
                                                     const std::string& manifest_path) {
  const std::string path = JoinPath(dir, name);
  const Json& files = manifest.body.value("files", Json::object());
  const auto entry = files.find(name);
  if (entry == files.end() || !entry->is_object())
    return DataLoss(manifest_path, absl::StrCat("no entry for ", name));
  DDP_ASSIGN_OR_RETURN(const FileFingerprint expected, RecordedFingerprint(manifest_path, *entry, name));
  const Json expected_tensors = entry->value("tensors", Json::object());

  absl::StatusOr<std::string> bytes = ReadFileVerified(path, expected);
  if (absl::IsNotFound(bytes.status())) return DataLoss(path, "missing");
  if (absl::IsDataLoss(bytes.status())) return NameDamagedTensor(path, bytes.status(), expected_tensors);
  if (!bytes.ok()) return bytes.status();
  // The bytes are those that were written; the header must still agree with the manifest.
  DDP_ASSIGN_OR_RETURN(SafetensorsContents parsed, ParseSafetensors(*bytes, path));
  const std::string difference = FirstTensorDifference(expected_tensors, TensorEntries(parsed.tensors));
  if (!difference.empty()) return DataLoss(path, difference);
  return parsed;
}

// -------------------------------------------------------------------------------------------- saving

// Writes the three files into `tmp` (a new directory) and makes them durable.
absl::Status WriteCheckpointDirectory(const std::string& tmp, const std::string& model_bytes,
                                      const std::string& optimizer_bytes, const std::string& manifest) {
  if (::mkdir(tmp.c_str(), 0755) != 0) return FileError("create directory", tmp, errno);
  DDP_RETURN_IF_ERROR(WriteFileDurably(JoinPath(tmp, kModelFile), model_bytes));
  DDP_RETURN_IF_ERROR(WriteFileDurably(JoinPath(tmp, kOptimizerFile), optimizer_bytes));
  DDP_RETURN_IF_ERROR(WriteFileDurably(JoinPath(tmp, kManifestFile), manifest));  // last: marks completion
  return FsyncDirectory(tmp);
}

// Renames `tmp` to `final_path`, replacing an existing checkpoint directory there only once `tmp` is in
// place (the old one is moved aside first and restored if the rename fails).
absl::Status Publish(const std::string& dir, const std::string& tmp, const std::string& final_path,
                     const std::string& name, bool replace_existing) {
  std::error_code ec;
  const std::string aside = JoinPath(dir, ".old-" + name);
  const bool replacing = replace_existing && fs::is_directory(final_path, ec);
  if (replacing) {
    fs::remove_all(aside, ec);
    if (std::rename(final_path.c_str(), aside.c_str()) != 0) return FileError("move aside", final_path, errno);
  }
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const absl::Status status = FileError(absl::StrCat("rename ", tmp, " to"), final_path, errno);
    if (replacing) std::rename(aside.c_str(), final_path.c_str());
    return status;
  }
  if (replacing) fs::remove_all(aside, ec);
  return FsyncDirectory(dir);
}

// Points dir/latest at `name`, atomically.
absl::Status WriteLatest(const std::string& dir, const std::string& name) {
  return WriteFileAtomically(JoinPath(dir, kLatestFile), name + "\n");
}

// The step of a "step-<N>" directory name, or -1.
int64_t StepOfName(absl::string_view name) {
  int64_t step = -1;
  if (!absl::ConsumePrefix(&name, kStepPrefix) || name.empty() || !absl::SimpleAtoi(name, &step)) return -1;
  return step;
}

// The step-<N> directories of `dir` as (N, name), newest first; `*ec` is set when `dir` cannot be read.
std::vector<std::pair<int64_t, std::string>> StepDirectories(const std::string& dir, std::error_code* ec) {
  std::vector<std::pair<int64_t, std::string>> steps;
  for (const auto& entry : fs::directory_iterator(dir, *ec)) {
    const std::string name = entry.path().filename().string();
    const int64_t step = StepOfName(name);
    std::error_code is_dir_error;
    if (step >= 0 && entry.is_directory(is_dir_error)) steps.emplace_back(step, name);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

// Deletes all but the newest `keep_last` step-* directories, never `current`. Best effort.
void Prune(const std::string& dir, int keep_last, const std::string& current) {
  std::error_code ec;
  const std::vector<std::pair<int64_t, std::string>> steps = StepDirectories(dir, &ec);
  for (size_t i = static_cast<size_t>(keep_last); i < steps.size(); ++i) {
    if (steps[i].second != current) fs::remove_all(JoinPath(dir, steps[i].second), ec);
  }
}

// What dir/latest says, for FindNewestCheckpoint's note: "" when it names the step `taken`, else
// "<dir>/latest does not exist" / "... names step-9, which does not exist" / "... is malformed: ..." /
// "... names step-4".
std::string LatestDisagreement(const std::string& dir, const std::string& taken) {
  const std::string latest = JoinPath(dir, kLatestFile);
  const absl::StatusOr<std::string> path = LatestCheckpointPath(dir);
  if (absl::IsNotFound(path.status())) return absl::StrCat(latest, " does not exist");
  if (!path.ok()) return absl::StrCat(latest, " is unusable: ", path.status().message());
  const std::string named = fs::path(*path).filename().string();
  if (named == taken) return "";
  std::error_code ec;
  if (!fs::is_directory(*path, ec)) return absl::StrCat(latest, " names ", named, ", which does not exist");
  return absl::StrCat(latest, " names ", named);
}

absl::Status Prefixed(const absl::Status& status, const std::string& prefix) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

}  // namespace

Checkpoint CaptureCheckpoint(const Module& module, const Optimizer* optimizer, const SamplerState& sampler,
                             const Generator* generator, int64_t step, int64_t epoch) {
  Checkpoint checkpoint;
  checkpoint.model = module.StateDict();
  if (optimizer != nullptr) checkpoint.optimizer = optimizer->StateDict();
  checkpoint.sampler = sampler;
  if (generator != nullptr) checkpoint.rng_state = generator->SaveState();
  checkpoint.step = step;
  checkpoint.epoch = epoch;
  return checkpoint;
}

absl::Status SaveCheckpoint(const std::string& dir, const Checkpoint& checkpoint,
                            const SaveCheckpointOptions& options) {
  if (checkpoint.step < 0)
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: negative step ", checkpoint.step));
  if (checkpoint.extra_state.count("") > 0) {
    return absl::InvalidArgumentError("checkpoint: an extra_state entry has an empty name");
  }
  absl::StatusOr<std::string> model_bytes = SerializeSafetensors(checkpoint.model);
  if (!model_bytes.ok()) return Prefixed(model_bytes.status(), "checkpoint: model: ");
  absl::StatusOr<std::string> optimizer_bytes = SerializeSafetensors(checkpoint.optimizer.tensors);
  if (!optimizer_bytes.ok()) return Prefixed(optimizer_bytes.status(), "checkpoint: optimizer: ");
  DDP_ASSIGN_OR_RETURN(const std::string manifest, BuildManifest(checkpoint, *model_bytes, *optimizer_bytes));

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return FileError("create checkpoint directory", dir, ec.value());
  const std::string name = absl::StrCat(kStepPrefix, checkpoint.step);
  const std::string tmp = JoinPath(dir, ".tmp-" + name);
  if (!options.replace_existing && fs::exists(fs::symlink_status(JoinPath(dir, name), ec))) {
    return absl::AlreadyExistsError(
        absl::StrCat("checkpoint: ", JoinPath(dir, name),
                     " already exists and is not replaced (another run's checkpoint?)"));
  }
  fs::remove_all(tmp, ec);  // a leftover of an interrupted save
  absl::Status status = WriteCheckpointDirectory(tmp, *model_bytes, *optimizer_bytes, manifest);
  if (status.ok()) status = Publish(dir, tmp, JoinPath(dir, name), name, options.replace_existing);
  if (!status.ok()) {
    fs::remove_all(tmp, ec);
    return status;
  }
  DDP_RETURN_IF_ERROR(WriteLatest(dir, name));
  if (options.keep_last > 0) Prune(dir, options.keep_last, name);
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> LoadCheckpoint(const std::string& path) {
  const std::string manifest_path = JoinPath(path, kManifestFile);
  absl::StatusOr<std::string> text = ReadFile(manifest_path);
  if (absl::IsNotFound(text.status())) return DataLoss(manifest_path, "missing (incomplete checkpoint?)");
  if (!text.ok()) return text.status();
  DDP_ASSIGN_OR_RETURN(const Manifest manifest, ParseManifest(manifest_path, *text));

  Checkpoint checkpoint;
  checkpoint.source = path;
  std::string sampler_text;
  DDP_RETURN_IF_ERROR(GetInt(manifest_path, manifest.body, "step", &checkpoint.step));
  DDP_RETURN_IF_ERROR(GetInt(manifest_path, manifest.body, "epoch", &checkpoint.epoch));
  DDP_RETURN_IF_ERROR(
      GetInt(manifest_path, manifest.body, "optimizer_step_count", &checkpoint.optimizer.step_count));
  DDP_RETURN_IF_ERROR(GetString(manifest_path, manifest.body, "rng_state", &checkpoint.rng_state));
  DDP_RETURN_IF_ERROR(ReadExtraState(manifest_path, manifest.body, &checkpoint.extra_state));
  DDP_RETURN_IF_ERROR(GetString(manifest_path, manifest.body, "sampler", &sampler_text));
  absl::StatusOr<SamplerState> sampler = SamplerState::FromText(sampler_text);
  if (!sampler.ok()) return DataLoss(manifest_path, std::string(sampler.status().message()));
  checkpoint.sampler = *sampler;

  DDP_ASSIGN_OR_RETURN(SafetensorsContents model,
                       ReadVerifiedFile(path, kModelFile, manifest, manifest_path));
  DDP_ASSIGN_OR_RETURN(SafetensorsContents optimizer,
                       ReadVerifiedFile(path, kOptimizerFile, manifest, manifest_path));
  checkpoint.model = std::move(model.tensors);
  checkpoint.optimizer.tensors = std::move(optimizer.tensors);
  return checkpoint;
}

absl::StatusOr<std::string> LatestCheckpointPath(const std::string& dir) {
  const std::string latest = JoinPath(dir, kLatestFile);
  absl::StatusOr<std::string> text = ReadFile(latest);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir, " (", latest, " does not exist)"));
  }
  if (!text.ok()) return text.status();
  const std::string name(absl::StripAsciiWhitespace(*text));
  if (StepOfName(name) < 0)
    return DataLoss(latest, absl::StrCat("does not name a step-<N> directory: \"", name, "\""));
  return JoinPath(dir, name);
}

absl::StatusOr<Checkpoint> LoadLatestCheckpoint(const std::string& dir) {
  DDP_ASSIGN_OR_RETURN(const std::string path, LatestCheckpointPath(dir));
  return LoadCheckpoint(path);
}

absl::StatusOr<std::vector<int64_t>> ListCheckpointSteps(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return std::vector<int64_t>{};
  const std::vector<std::pair<int64_t, std::string>> found = StepDirectories(dir, &ec);
  if (ec) return FileError("list checkpoint directory", dir, ec.value());
  std::vector<int64_t> steps;
  for (const auto& [step, name] : found) steps.push_back(step);
  return steps;
}

// Note [Finding the newest checkpoint]
// dir/latest is a pointer that can be missing (deleted by hand, a copy of the step directories only)
// or behind (a crash between publishing step-<N> and replacing dir/latest, Note [Checkpoint
// atomicity]), while a step-<N> directory is complete by construction and verifiable on its own. So a
// resume trusts the directories: it tries them newest first and takes the first that verifies, which is
// dir/latest's step whenever dir/latest is right. Newer steps that fail to verify are named in the note
// rather than silently passed over; a caller that is about to write checkpoints decides what happens to
// them (train/train refuses to overwrite them without --overwrite_checkpoints).
absl::StatusOr<FoundCheckpoint> FindNewestCheckpoint(const std::string& dir) {
  DDP_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListCheckpointSteps(dir));
  if (steps.empty()) return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir, " (no step-<N> directory)"));
  std::vector<std::string> skipped;
  for (const int64_t step : steps) {
    const std::string name = absl::StrCat(kStepPrefix, step);
    absl::StatusOr<Checkpoint> loaded = LoadCheckpoint(JoinPath(dir, name));
    if (!loaded.ok()) {
      skipped.push_back(absl::StrCat("skipped ", name, ": ", loaded.status().message()));
      continue;
    }
    FoundCheckpoint found{*std::move(loaded), ""};
    const std::string latest = LatestDisagreement(dir, name);
    if (!latest.empty()) found.scan_note = absl::StrCat(latest, "; took ", name, ", the newest complete step");
    if (!skipped.empty()) {
      if (found.scan_note.empty()) found.scan_note = absl::StrCat("took ", name, ", the newest complete step");
      found.scan_note = absl::StrCat(found.scan_note, "; ", absl::StrJoin(skipped, "; "));
    }
    return found;
  }
  return absl::DataLossError(
      absl::StrCat("no complete checkpoint in ", dir, ": ", absl::StrJoin(skipped, "; ")));
}

absl::StatusOr<std::vector<std::string>> RemoveCheckpointsAfter(const std::string& dir, int64_t step) {
  DDP_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCheckpointSteps(dir));
  std::vector<std::string> removed;
  std::error_code ec;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it <= step) continue;
    const std::string name = absl::StrCat(kStepPrefix, *it);
    fs::remove_all(JoinPath(dir, name), ec);
    if (ec) return FileError("remove", JoinPath(dir, name), ec.value());
    removed.push_back(name);
  }
  const absl::StatusOr<std::string> latest = LatestCheckpointPath(dir);
  if (latest.ok() && !fs::is_directory(*latest, ec) && ::unlink(JoinPath(dir, kLatestFile).c_str()) != 0) {
    return FileError("remove", JoinPath(dir, kLatestFile), errno);
  }
  return removed;
}

absl::Status ApplyCheckpoint(const Checkpoint& checkpoint, const CheckpointTargets& targets) {
  const std::string source = checkpoint.source.empty() ? "<checkpoint>" : checkpoint.source;
  // Validate what cannot be checked without changing state on copies first, so an error changes nothing.
  Generator generator;
  if (targets.generator != nullptr) {
    generator = *targets.generator;
    if (checkpoint.rng_state.empty()) return DataLoss(JoinPath(source, kManifestFile), "holds no RNG state");
    DDP_RETURN_IF_ERROR(
        Prefixed(generator.LoadState(checkpoint.rng_state),
                 absl::StrCat("checkpoint file ", JoinPath(source, kManifestFile), ": rng_state: ")));
  }
  OptimizerState previous;
  if (targets.optimizer != nullptr) {
    previous = targets.optimizer->StateDict();
    DDP_RETURN_IF_ERROR(Prefixed(targets.optimizer->LoadStateDict(checkpoint.optimizer),
                                 absl::StrCat("checkpoint file ", JoinPath(source, kOptimizerFile), ": ")));
  }
  if (targets.module != nullptr) {
    const absl::Status status = targets.module->LoadStateDict(checkpoint.model, /*strict=*/true);
    if (!status.ok()) {
      if (targets.optimizer != nullptr) DDP_CHECK(targets.optimizer->LoadStateDict(previous).ok());
      return Prefixed(status, absl::StrCat("checkpoint file ", JoinPath(source, kModelFile), ": "));
    }
  }
  if (targets.generator != nullptr) *targets.generator = generator;
  return absl::OkStatus();
}

}  // namespace ddp

#include "sim/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/check.h"
#include "base/cpu_identity.h"
#include "io/file.h"
#include "nlohmann/json.hpp"
#include "nn/models.h"
#include "sim/cli_internal.h"
#include "sim/profile.h"
#include "tensor/random.h"

namespace ddp {
namespace sim {
namespace {

using nlohmann::json;

constexpr double kMiB = 1 << 20;

// The largest world size a flag may name (the formulas would take more; no cluster has more).
constexpr int kMaxWorldSize = 1 << 24;

// "--<name>=<value>: must be from <low> to <high> (<unit>)" unless low <= value <= high.
absl::Status CheckInt(const char* name, int64_t value, int64_t low, int64_t high, const char* unit) {
  if (value >= low && value <= high) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": must be ",
                                                 high >= INT32_MAX ? absl::StrCat(">= ", low)
                                                                   : absl::StrCat("from ", low, " to ", high),
                                                 " (", unit, ")"));
}

enum class Bound { kPositive, kNonNegative, kFraction };

// "--<name>=<value>: must be ..." unless `value` is finite and within `bound`.
absl::Status CheckReal(const char* name, double value, Bound bound, const char* unit) {
  bool ok = std::isfinite(value);
  const char* rule = "";
  switch (bound) {
    case Bound::kPositive:
      ok = ok && value > 0;
      rule = "a finite number > 0";
      break;
    case Bound::kNonNegative:
      ok = ok && value >= 0;
      rule = "a finite number >= 0";
      break;
    case Bound::kFraction:
      ok = ok && value >= 0 && value <= 1;
      rule = "from 0 to 1";
      break;
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": must be ", rule, " (", unit, ")"));
}


// Samples of `impl` per world size from bench/allreduce's JSON lines.
absl::StatusOr<std::map<int, std::vector<Sample>>> ReadBenchRows(const std::string& text,
                                                                 const std::string& impl) {
  std::map<int, std::vector<Sample>> rows;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    const json row = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (!row.is_object() || !row.contains("bytes") || !row.contains("time_us") || !row.contains("world_size"))
      continue;
    if (row.value("impl", "") != impl) continue;
    rows[row["world_size"].get<int>()].push_back(
        {row["bytes"].get<double>(), row["time_us"].get<double>() * 1e-6});
  }
  if (rows.empty())
    return absl::InvalidArgumentError(absl::StrCat("no bench/allreduce JSON rows of impl \"", impl, "\""));
  return rows;
}

absl::StatusOr<std::string> RunFit(const CliFlags& flags) {
  absl::StatusOr<std::string> text = ReadFile(flags.bench);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::map<int, std::vector<Sample>>> rows = ReadBenchRows(*text, flags.impl);
  if (!rows.ok()) return rows.status();
  json fits = json::array();
  std::string report = absl::StrFormat("%-8s %6s %10s %12s %9s %9s\n", "backend", "world", "alpha us",
                                       "GB/s (1/b)", "median err", "max err");
  for (const auto& [world, samples] : *rows) {
    absl::StatusOr<LineFit> fit = FitLine(samples);
    if (!fit.ok()) return fit.status();
    fits.push_back({{"backend", flags.backend},
                    {"impl", flags.impl},
                    {"world_size", world},
                    {"alpha_s", fit->alpha_s},
                    {"beta_s_per_byte", fit->beta_s_per_byte},
                    {"median_relative_error", fit->median_relative_error},
                    {"max_relative_error", fit->max_relative_error},
                    {"samples", fit->samples}});
    absl::StrAppendFormat(&report, "%-8s %6d %10.1f %12.3f %8.1f%% %8.1f%%\n", flags.backend, world,
                          1e6 * fit->alpha_s, 1e-9 / fit->beta_s_per_byte, 100 * fit->median_relative_error,
                          100 * fit->max_relative_error);
  }
  const json out = {{"machine", CpuModelName()},
                    {"date", absl::FormatTime("%Y-%m-%d", absl::Now(), absl::UTCTimeZone())},
                    {"source", flags.bench},
                    {"fits", fits}};
  if (!flags.out.empty()) {
    absl::Status written = WriteFileAtomically(flags.out, out.dump(1) + "\n");
    if (!written.ok()) return written;
    absl::StrAppend(&report, "wrote ", flags.out, "\n");
  }
  return report;
}

absl::StatusOr<std::string> RunProfile(const CliFlags& flags) {
  Generator generator(0);
  absl::StatusOr<std::shared_ptr<Module>> model = MakeModel(flags.model, generator);
  if (!model.ok()) return model.status();
  std::vector<ParameterShape> shapes;
  for (const auto& [name, tensor] : (*model)->NamedParameters()) shapes.push_back({name, tensor.numel()});
  absl::StatusOr<std::string> trace = ReadFile(flags.trace);
  if (!trace.ok()) return trace.status();
  TraceProfileOptions options{flags.rank, flags.skip, {}};
  DDP_ASSIGN_OR_RETURN(options.iterations, ParseIterationRanges(flags.iterations));
  absl::StatusOr<ComputeProfile> profile = ProfileFromTrace(*trace, shapes, options);
  if (!profile.ok()) return profile.status();
  const std::string json_text = ProfileToJson(*profile) + "\n";
  if (flags.out.empty()) return json_text;
  absl::Status written = WriteFileAtomically(flags.out, json_text);
  if (!written.ok()) return written;
  return absl::StrFormat("forward %.3f ms, backward %.3f ms, other %.3f ms, %d parameters; wrote %s\n",
                         1e3 * profile->forward_s, 1e3 * profile->backward_s, 1e3 * profile->other_s,
                         profile->params.size(), flags.out);
}

absl::StatusOr<std::string> RunPredict(const CliFlags& flags) {
  absl::StatusOr<ComputeProfile> profile = LoadProfile(flags);
  if (!profile.ok()) return profile.status();
  absl::StatusOr<SimOptions> options = LoadOptions(flags, flags.world_size);
  if (!options.ok()) return options.status();
  options->overlap = !flags.no_overlap;
  auto caps = ParseCapsList(flags.caps);  // CheckFlags parsed it already
  std::string report =
      absl::StrFormat("%-10s %8s %9s %9s %11s\n", "caps MiB", "buckets", "step ms", "comm ms", "exposed ms");
  for (const auto& [label, setting] : *caps) {
    options->caps = setting;
    const StepPrediction p = SimulateStep(*profile, *options);
    absl::StrAppendFormat(&report, "%-10s %8d %9.3f %9.3f %11.3f\n", label, p.buckets.size(), 1e3 * p.step_s,
                          1e3 * p.comm_s, 1e3 * p.exposed_comm_s);
    if (flags.per_bucket) absl::StrAppend(&report, DescribePrediction(p), "\n");
  }
  return report;
}

// The curve of world size `world` in a fit file, as a link (Note [Link model]).
absl::StatusOr<LinkSpec> LinkFromFile(const std::string& path, int world) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  const json in = json::parse(text->begin(), text->end(), nullptr, /*allow_exceptions=*/false);
  if (!in.is_object() || !in.contains("fits") || !in["fits"].is_array())
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a link fit (no \"fits\")"));
  for (const json& fit : in["fits"]) {
    if (!fit.is_object() || !fit.value("world_size", json(0)).is_number_integer() || fit.value("world_size", 0) != world)
      continue;
    LineFit line;
    const json alpha = fit.value("alpha_s", json(0.0)), beta = fit.value("beta_s_per_byte", json(0.0));
    if (!alpha.is_number() || !beta.is_number() || !(alpha.get<double>() >= 0) || !(beta.get<double>() >= 0))
      return absl::InvalidArgumentError(absl::StrCat(path, ": the fit for world size ", world,
                                                     " needs numbers alpha_s >= 0 and beta_s_per_byte >= 0"));
    line.alpha_s = alpha.get<double>();
    line.beta_s_per_byte = beta.get<double>();
    return LinkFromRingFit(line, world);  // world >= 2: CheckFlags
  }
  return absl::InvalidArgumentError(absl::StrCat(path, " has no fit for world size ", world));
}

}  // namespace

absl::StatusOr<size_t> CapBytes(absl::string_view mib) {
  if (mib == "inf") return SIZE_MAX;
  double value = 0;
  // Finite, >= 0 and at most 2^40 MiB (1 EiB: beyond any model, and within size_t).
  if (!absl::SimpleAtod(mib, &value) || !(value >= 0) || value > 1099511627776.0)
    return absl::InvalidArgumentError(absl::StrCat("bad cap \"", mib, "\" (MiB from 0 to 2^40, or inf)"));
  return static_cast<size_t>(value * kMiB);
}

absl::StatusOr<std::vector<std::pair<std::string, BucketCaps>>> ParseCapsList(absl::string_view text) {
  std::vector<std::pair<std::string, BucketCaps>> out;
  for (absl::string_view entry : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> parts = absl::StrSplit(entry, '/');
    if (parts.size() > 2)
      return absl::InvalidArgumentError(absl::StrCat("bad caps \"", entry, "\" (C or F/C, MiB)"));
    absl::StatusOr<size_t> first = CapBytes(parts[0]);
    absl::StatusOr<size_t> cap = CapBytes(parts.back());
    if (!first.ok()) return first.status();
    if (!cap.ok()) return cap.status();
    out.emplace_back(std::string(entry), BucketCaps{*first, *cap});
  }
  if (out.empty()) return absl::InvalidArgumentError("no caps given");
  return out;
}

std::string CapsLabel(const BucketCaps& caps) {
  auto mib = [](size_t bytes) { return bytes == SIZE_MAX ? std::string("inf") : absl::StrCat(bytes / kMiB); };
  if (caps.first_bucket_cap_bytes == caps.bucket_cap_bytes) return mib(caps.bucket_cap_bytes);
  return absl::StrCat(mib(caps.first_bucket_cap_bytes), "/", mib(caps.bucket_cap_bytes));
}

absl::StatusOr<ComputeProfile> LoadProfile(const CliFlags& flags) {
  if (!flags.profile.empty() == !flags.synthetic.empty())
    return absl::InvalidArgumentError("give one of --profile and --synthetic");
  if (!flags.profile.empty()) {
    absl::StatusOr<std::string> text = ReadFile(flags.profile);
    if (!text.ok()) return text.status();
    return ProfileFromJson(*text);
  }
  if (flags.synthetic == "resnet50") return SyntheticProfile(ResNet50Layers(), flags.rates);
  absl::string_view widths_text = flags.synthetic;
  if (!absl::ConsumePrefix(&widths_text, "mlp:"))
    return absl::InvalidArgumentError(
        absl::StrCat("--synthetic=", flags.synthetic, ": mlp:W0,W1,... or resnet50"));
  std::vector<int64_t> widths;
  for (absl::string_view w : absl::StrSplit(widths_text, ',')) {
    int64_t width = 0;
    if (!absl::SimpleAtoi(w, &width) || width <= 0)
      return absl::InvalidArgumentError(absl::StrCat("--synthetic: bad width \"", w, "\""));
    widths.push_back(width);
  }
  if (widths.size() < 2) return absl::InvalidArgumentError("--synthetic=mlp: needs at least two widths");
  return SyntheticProfile(MlpLayers(widths), flags.rates);
}

absl::StatusOr<SimOptions> LoadOptions(const CliFlags& flags, int world_size) {
  SimOptions options;
  absl::StatusOr<AllReduceAlgorithm> algorithm = ParseAlgorithm(flags.algorithm);
  if (!algorithm.ok()) return algorithm.status();
  options.algorithm = *algorithm;
  options.max_in_flight = flags.max_in_flight;  // CheckFlags: >= 1
  options.compute_lost_to_comm = flags.compute_lost_to_comm;
  options.comm_after_first_backward = flags.comm_after_first_backward;
  if (!flags.shared_core_link.empty()) {
    if (!flags.comm_after_first_backward)
      return absl::InvalidArgumentError("--shared_core_link goes with --comm_after_first_backward");
    absl::StatusOr<LinkSpec> shared = LinkFromFile(flags.shared_core_link, flags.link_world_size);
    if (!shared.ok()) return shared.status();
    options.shared_core_link = *shared;
  }
  const double burst_bytes = flags.burst_kib * 1024;
  if (!flags.preset.empty()) {
    absl::StatusOr<Cluster> cluster = PresetCluster(flags.preset, world_size);
    if (!cluster.ok()) return cluster.status();
    options.cluster = *cluster;
    options.cluster.inter.burst_bytes = burst_bytes;
    return options;
  }
  options.cluster.world_size = world_size;
  if (!flags.link.empty()) {
    absl::StatusOr<LinkSpec> link = LinkFromFile(flags.link, flags.link_world_size);
    if (!link.ok()) return link.status();
    options.cluster.intra = *link;
  } else if (flags.alpha_us.has_value() && flags.gbps.has_value()) {
    options.cluster.intra = LinkSpec{*flags.alpha_us * 1e-6, 1.0 / (*flags.gbps * 1e9)};
  } else if (flags.alpha_us.has_value() != flags.gbps.has_value()) {
    return absl::InvalidArgumentError(flags.alpha_us.has_value() ? "--alpha_us needs --gbps too"
                                                                 : "--gbps needs --alpha_us too");
  } else {
    return absl::InvalidArgumentError("name the link: --link=FILE, --alpha_us and --gbps, or --preset");
  }
  options.cluster.intra.burst_bytes = burst_bytes;
  return options;
}

absl::Status CheckFlags(const CliFlags& f) {
  DDP_RETURN_IF_ERROR(CheckInt("world_size", f.world_size, 1, kMaxWorldSize, "ranks"));
  DDP_RETURN_IF_ERROR(CheckInt("link_world_size", f.link_world_size, 2, kMaxWorldSize,
                               "the fit's world size: a ring needs two ranks"));
  DDP_RETURN_IF_ERROR(CheckInt("max_in_flight", f.max_in_flight, 1, 1 << 20, "collectives at once"));
  DDP_RETURN_IF_ERROR(CheckInt("rank", f.rank, 0, kMaxWorldSize - 1, "a rank of the trace"));
  DDP_RETURN_IF_ERROR(CheckInt("skip", f.skip, 0, INT32_MAX, "iterations"));
  DDP_RETURN_IF_ERROR(CheckInt("batch", f.rates.batch, 1, int64_t{1} << 40, "samples per rank"));
  DDP_RETURN_IF_ERROR(CheckReal("tflops", f.rates.flop_per_s / 1e12, Bound::kPositive, "TFLOP/s of one rank"));
  DDP_RETURN_IF_ERROR(CheckReal("mem_gbps", f.rates.memory_bytes_per_s / 1e9, Bound::kPositive, "GB/s of one rank"));
  if (f.alpha_us) {
    DDP_RETURN_IF_ERROR(CheckReal("alpha_us", *f.alpha_us, Bound::kNonNegative, "microseconds per message"));
  }
  if (f.gbps) DDP_RETURN_IF_ERROR(CheckReal("gbps", *f.gbps, Bound::kPositive, "GB/s of one link"));
  DDP_RETURN_IF_ERROR(CheckReal("burst_kib", f.burst_kib, Bound::kNonNegative, "KiB"));
  DDP_RETURN_IF_ERROR(CheckReal("compute_lost_to_comm", f.compute_lost_to_comm, Bound::kFraction,
                                "a share of compute speed"));
  if (absl::Status caps = ParseCapsList(f.caps).status(); !caps.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--caps=", f.caps, ": ", caps.message()));
  }
  if (absl::Status ranges = ParseIterationRanges(f.iterations).status(); !ranges.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--iterations=", f.iterations, ": ", ranges.message()));
  }
  for (absl::string_view entry : absl::StrSplit(f.ranks, ',', absl::SkipWhitespace())) {
    int world = 0;
    if (!absl::SimpleAtoi(entry, &world) || world < 1 || world > kMaxWorldSize) {
      return absl::InvalidArgumentError(absl::StrCat("--ranks=", f.ranks, ": \"", entry,
                                                     "\" is not a world size from 1 to ", kMaxWorldSize));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RunSubcommand(absl::string_view name, const CliFlags& flags) {
  DDP_RETURN_IF_ERROR(CheckFlags(flags));
  if (name == "fit") return RunFit(flags);
  if (name == "profile") return RunProfile(flags);
  if (name == "predict") return RunPredict(flags);
  if (name == "validate") return RunValidate(flags);
  if (name == "scale") return RunScale(flags);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown subcommand \"", name, "\" (fit, profile, predict, validate, scale)"));
}

}  // namespace sim
}  // namespace ddp

#include "launch/torchrun_args.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/check.h"
#include "launch/rank_output.h"
#include "launch/virtual_local_rank.h"
#include "store/job_token.h"

namespace ddp {
namespace {

// One flag ddprun understands. Syntax only; meaning is given in Finalize.
struct FlagSpec {
  const char* name;        // canonical spelling, underscores ("nproc_per_node")
  char short_name;         // torchrun's one-letter form, or 0
  bool takes_value;
  bool torchrun;           // torchrun has it (so PET_<NAME> gives its default)
  const char* default_text;
  const char* help;
};

constexpr FlagSpec kFlags[] = {
    {"nnodes", 0, true, true, "1", "Nodes: N, or MIN:MAX (an elastic range; needs --rdzv_backend=c10d)."},
    {"nproc_per_node", 0, true, true, "1", "Workers on this node: N, cpu (CPUs), gpu (CUDA devices) or auto."},
    {"rdzv_backend", 0, true, true, "static", "static (--node_rank, --master_addr) or c10d (--rdzv_endpoint)."},
    {"rdzv_endpoint", 0, true, true, "", "HOST[:PORT] where the nodes meet (c10d; port 29400 by default)."},
    {"rdzv_id", 0, true, true, "none", "The job's id (TORCHELASTIC_RUN_ID); nodes of one c10d job must agree."},
    {"rdzv_conf", 0, true, true, "", "KEY=VALUE,...: join_timeout, last_call_timeout (seconds), is_host."},
    {"standalone", 0, false, true, "", "One node, a rendezvous on a free local port (c10d, localhost:0)."},
    {"max_restarts", 0, true, true, "0", "Restarts of the local worker group after a failure."},
    {"monitor_interval", 0, true, true, "0.1", "Seconds between checks of the workers while they are quiet."},
    {"start_method", 0, true, true, "spawn", "Only spawn: every worker is a fresh process (fork+exec)."},
    {"event_log_handler", 0, true, true, "null", "Only null: ddprun has no event log handlers."},
    {"role", 0, true, true, "default", "The workers' role (ROLE_NAME)."},
    {"module", 'm', false, true, "", "Run the script as a Python module (python -m)."},
    {"no_python", 0, false, true, "", "Run the script itself, not with Python."},
    {"run_path", 0, false, true, "", "Run the script (an absolute path) with runpy.run_path."},
    {"log_dir", 0, true, true, "", "Folder for rank_N.log and torchrun's <run_id>_*/attempt_N/LOCAL_RANK/ tree."},
    {"redirects", 'r', true, true, "0", "Streams sent to log files only: 0-3 (none, stdout, stderr, both) or LR:V,..."},
    {"tee", 't', true, true, "0", "Streams sent to log files and the console (as --redirects)."},
    {"local_ranks_filter", 0, true, true, "", "Local ranks whose output reaches the console, e.g. 0,1."},
    {"log_line_prefix_template", 0, true, true, "",
     "Prefix of every console line, with ${role_name}, ${rank}, ${local_rank}, ${hostname} (else "
     "$TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else \"[rank N] \")."},
    {"duplicate_stdout_filters", 0, true, true, "",
     "Console stdout lines containing any of these comma-separated strings (,, for a comma) also go to "
     "<attempt>/filtered_stdout.log."},
    {"duplicate_stderr_filters", 0, true, true, "", "The same for stderr (filtered_stderr.log)."},
    {"virtual_local_rank", 0, false, true, "",
     "Every worker gets LOCAL_RANK=0 and sees only its own GPU (CUDA_VISIBLE_DEVICES entry LOCAL_RANK)."},
    {"node_rank", 0, true, true, "0", "This node's rank (static rendezvous)."},
    {"master_addr", 0, true, true, "127.0.0.1", "Node 0's address (static rendezvous)."},
    {"master_port", 0, true, true, "29500", "Port of ddprun's store on node 0 (static rendezvous); 0 picks one."},
    {"local_addr", 0, true, true, "", "The address other nodes reach this node at (c10d; MASTER_ADDR if it is node 0)."},
    {"signals_to_handle", 0, true, true, "SIGTERM,SIGINT,SIGHUP,SIGQUIT", "Signals forwarded to the workers."},
    {"shutdown_timeout", 0, true, true, "", "Seconds between SIGTERM and SIGKILL (the same as --grace_period_s)."},
    {"help", 'h', false, true, "", "Print this help."},
    {"redirect", 0, true, false, "all", "What ranks other than 0 print: all | errors (stderr only) | none."},
    {"grace_period_s", 0, true, false, "5", "Seconds between SIGTERM and SIGKILL when stopping workers."},
    {"job_token", 0, true, false, "", "The store's job token (else $DDP_JOB_TOKEN, $DDP_JOB_TOKEN_FILE, a random one)."},
    {"job_token_file", 0, true, false, "", "File holding the job token, on a filesystem every node sees."},
    {"elastic", 0, false, false, "", "A worker that dies does not stop the others, which regroup (train --elastic; docs/elastic.md)."},
    {"min_world_size", 0, true, false, "1", "With --elastic: the fewest ranks the job continues with; below it the survivors stop with a checkpoint."},
};

// torchrun's flags that ddprun refuses, and why.
struct RejectedFlag {
  const char* name;
  bool takes_value;
  const char* accepted_value;  // a value that means what ddprun does anyway (accepted), or nullptr
  const char* why;
};

constexpr RejectedFlag kRejected[] = {
    {"start_method", true, "spawn",
     "ddprun starts every worker as a fresh process (fork+exec, torchrun's 'spawn'); there is no Python parent "
     "to fork from"},
    {"event_log_handler", true, "null", "ddprun has no event log handlers (a Python plugin registry of torchrun)"},
    {"logs_specs", true, nullptr,
     "it names a Python entry point (a torchrun.logs_specs plugin); ddprun is not a Python program and cannot "
     "load one"},
    {"numa_binding", true, nullptr,
     "not implemented: it binds each worker to the CPUs of the NUMA node (or socket, core complex) of the GPU "
     "with its local rank's index, which ddprun would have to find from the GPU's PCI device; no machine it is "
     "tested on has a GPU and more than one NUMA node. Run the program under numactl in a wrapper that execs it"},
    {"print_completion", true, nullptr, "ddprun has no shell completion scripts"},
    {"use_env", false, nullptr, "it belongs to torch.distributed.launch; ddprun, as torchrun, always passes LOCAL_RANK "
                         "in the environment"},
};

const FlagSpec* FindFlag(absl::string_view name) {
  for (const FlagSpec& f : kFlags) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

const FlagSpec* FindShortFlag(char c) {
  for (const FlagSpec& f : kFlags) {
    if (f.short_name == c) return &f;
  }
  return nullptr;
}

const RejectedFlag* FindRejected(absl::string_view name) {
  for (const RejectedFlag& r : kRejected) {
    if (name == r.name) return &r;
  }
  return nullptr;
}

absl::Status Invalid(absl::string_view flag, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", message));
}

// The raw flag values, by canonical name ("1" for a boolean flag that was given).
using RawFlags = std::map<std::string, std::string>;

// Stores one flag, or refuses it.
absl::Status Record(const std::string& name, const std::string& value, RawFlags* raw) {
  if (const RejectedFlag* r = FindRejected(name)) {
    if (r->accepted_value == nullptr || value != r->accepted_value) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, (value.empty() ? "" : "="), value, " is not supported by ddprun: ", r->why));
    }
  }
  (*raw)[name] = value;
  return absl::OkStatus();
}

// PET_<NAME> variables: torchrun's defaults from the environment.
absl::Status ReadPetVariables(const std::map<std::string, std::string>& env, RawFlags* raw) {
  for (const FlagSpec& f : kFlags) {
    if (!f.torchrun) continue;
    auto it = env.find(absl::StrCat("PET_", absl::AsciiStrToUpper(f.name)));
    if (it == env.end()) continue;
    if (!f.takes_value) {
      int on = 0;
      if (!absl::SimpleAtoi(it->second, &on)) {
        return absl::InvalidArgumentError(absl::StrCat(it->first, "=", it->second, ": expected 0 or 1"));
      }
      if (on != 0) DDP_RETURN_IF_ERROR(Record(f.name, "1", raw));
      continue;
    }
    DDP_RETURN_IF_ERROR(Record(f.name, it->second, raw));
  }
  for (const RejectedFlag& r : kRejected) {
    auto it = env.find(absl::StrCat("PET_", absl::AsciiStrToUpper(r.name)));
    if (it != env.end() && (r.takes_value || it->second != "0")) DDP_RETURN_IF_ERROR(Record(r.name, it->second, raw));
  }
  return absl::OkStatus();
}

// Reads flags from argv[1...] into `raw`; returns the index of the script (argv.size() when none).
absl::StatusOr<size_t> ReadFlags(const std::vector<std::string>& argv, RawFlags* raw) {
  size_t i = 1;
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "--") return i + 1;
    if (arg.size() < 2 || arg[0] != '-') return i;
    std::string name, value;
    bool has_value = false;
    const FlagSpec* spec = nullptr;
    if (arg[1] != '-') {  // -m, -h, -r V, -r3, -t V
      spec = FindShortFlag(arg[1]);
      if (spec == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg));
      name = spec->name;
      if (arg.size() > 2) {
        if (!spec->takes_value) return absl::InvalidArgumentError(absl::StrCat("-", std::string(1, arg[1]), " takes no value: ", arg));
        value = arg.substr(arg[2] == '=' ? 3 : 2);
        has_value = true;
      }
    } else {
      const size_t eq = arg.find('=');
      name = absl::StrReplaceAll(arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2), {{"-", "_"}});
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        has_value = true;
      }
      spec = FindFlag(name);
      if (spec == nullptr && FindRejected(name) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg, " (ddprun --help lists them)"));
      }
    }
    const bool takes_value = spec != nullptr ? spec->takes_value : FindRejected(name)->takes_value;
    if (!takes_value) {
      if (has_value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value: ", arg));
      value = spec != nullptr ? "1" : "";
    } else if (!has_value) {
      if (i + 1 >= argv.size()) return Invalid(name, "needs a value");
      value = argv[++i];
    }
    DDP_RETURN_IF_ERROR(Record(name, value, raw));
  }
  return i;
}

std::string Get(const RawFlags& raw, const std::string& name) {
  auto it = raw.find(name);
  if (it != raw.end()) return it->second;
  const FlagSpec* spec = FindFlag(name);
  return spec == nullptr ? "" : spec->default_text;
}

bool Given(const RawFlags& raw, const std::string& name) { return raw.count(name) > 0; }

absl::Status ParseInt(const RawFlags& raw, const std::string& name, int low, int* out) {
  const std::string text = Get(raw, name);
  if (!absl::SimpleAtoi(text, out) || *out < low) {
    return Invalid(name, absl::StrCat("expected an integer >= ", low, ", got \"", text, "\""));
  }
  return absl::OkStatus();
}

absl::Status ParseSeconds(const std::string& name, const std::string& text, bool allow_zero,
                          absl::Duration* out) {
  double seconds = 0;
  if (!absl::SimpleAtod(text, &seconds) || !(seconds > 0 || (allow_zero && seconds == 0)) || seconds > 1e7) {
    return Invalid(name, absl::StrCat("expected seconds ", allow_zero ? ">= 0" : "> 0", ", got \"", text, "\""));
  }
  *out = absl::Seconds(seconds);
  return absl::OkStatus();
}

// "N" or "MIN:MAX".
absl::Status ParseNodes(const std::string& text, LaunchOptions* o) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  int low = 0, high = 0;
  const bool ok = (parts.size() == 1 && absl::SimpleAtoi(parts[0], &low) && (high = low, true)) ||
                  (parts.size() == 2 && absl::SimpleAtoi(parts[0], &low) && absl::SimpleAtoi(parts[1], &high));
  if (!ok || low < 1 || high < low) {
    return Invalid("nnodes", absl::StrCat("expected N or MIN:MAX with 1 <= MIN <= MAX, got \"", text, "\""));
  }
  o->min_nodes = low;
  o->nnodes = high;
  return absl::OkStatus();
}

// "host", "host:port", "[v6]:port".
absl::Status ParseEndpoint(const std::string& text, int default_port, std::string* host, int* port) {
  std::string h = text, p;
  if (absl::StartsWith(text, "[")) {
    const size_t close = text.find(']');
    if (close == std::string::npos) return Invalid("rdzv_endpoint", absl::StrCat("unclosed '[' in \"", text, "\""));
    h = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') return Invalid("rdzv_endpoint", absl::StrCat("bad \"", text, "\""));
      p = text.substr(close + 2);
    }
  } else if (const size_t colon = text.rfind(':'); colon != std::string::npos && text.find(':') == colon) {
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
  }
  *port = default_port;
  if (!p.empty() && (!absl::SimpleAtoi(p, port) || *port < 0 || *port > 65535)) {
    return Invalid("rdzv_endpoint", absl::StrCat("bad port in \"", text, "\""));
  }
  if (h.empty()) return Invalid("rdzv_endpoint", absl::StrCat("no host in \"", text, "\""));
  *host = h;
  return absl::OkStatus();
}

// --rdzv_conf=key=value,...
absl::Status ParseRendezvousConf(const std::string& text, LaunchOptions* o, std::vector<std::string>* warnings) {
  if (text.empty()) return absl::OkStatus();
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2) return Invalid("rdzv_conf", absl::StrCat("expected KEY=VALUE, got \"", item, "\""));
    const std::string& key = kv[0];
    const std::string& value = kv[1];
    if (key == "join_timeout") {
      DDP_RETURN_IF_ERROR(ParseSeconds("rdzv_conf join_timeout", value, false, &o->join_timeout));
    } else if (key == "last_call_timeout") {
      DDP_RETURN_IF_ERROR(ParseSeconds("rdzv_conf last_call_timeout", value, true, &o->last_call_timeout));
    } else if (key == "is_host") {
      const std::string v = absl::AsciiStrToLower(value);
      if (v == "1" || v == "true") {
        o->is_host = true;
      } else if (v == "0" || v == "false") {
        o->is_host = false;
      } else {
        return Invalid("rdzv_conf", absl::StrCat("is_host must be true or false, got \"", value, "\""));
      }
    } else if (key == "read_timeout" || key == "close_timeout" || key == "timeout" || key == "use_libuv" ||
               key == "keep_alive_interval" || key == "keep_alive_max_attempt") {
      warnings->push_back(absl::StrCat("--rdzv_conf ", key, " has no meaning for ddprun's rendezvous; ignored"));
    } else {
      return Invalid("rdzv_conf", absl::StrCat("unknown key \"", key,
                                               "\" (ddprun knows join_timeout, last_call_timeout, is_host)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseSignals(const std::string& text, LaunchOptions* o) {
  static const std::pair<const char*, int> kNames[] = {
      {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT},   {"SIGHUP", SIGHUP},   {"SIGQUIT", SIGQUIT},
      {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGCONT", SIGCONT}, {"SIGALRM", SIGALRM}};
  o->signals_to_handle.clear();
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const std::string name(absl::StripAsciiWhitespace(item));
    int number = 0;
    for (const auto& [known, value] : kNames) {
      if (name == known) number = value;
    }
    if (number == 0) {
      return Invalid("signals_to_handle", absl::StrCat("cannot forward \"", name, "\" (known: SIGTERM, SIGINT, "
                                                       "SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGALRM)"));
    }
    o->signals_to_handle.push_back(number);
  }
  if (o->signals_to_handle.empty()) return Invalid("signals_to_handle", "no signal named");
  return absl::OkStatus();
}

// A random UUID (version 4), as torchrun's --standalone run id.
std::string RandomUuid() {
  std::string hex = GenerateJobToken();  // 32 random hex digits
  hex[12] = '4';
  hex[16] = "89ab"[std::isdigit(hex[16]) ? (hex[16] - '0') % 4 : (hex[16] - 'a' + 10) % 4];
  return absl::StrCat(hex.substr(0, 8), "-", hex.substr(8, 4), "-", hex.substr(12, 4), "-", hex.substr(16, 4), "-",
                      hex.substr(20, 12));
}

// The rendezvous flags: --standalone, --rdzv_*, --nnodes, --master_*, --node_rank, --local_addr.
absl::Status FinalizeRendezvous(const RawFlags& raw, DdprunCommandLine* c) {
  LaunchOptions& o = c->options;
  DDP_RETURN_IF_ERROR(ParseNodes(Get(raw, "nnodes"), &o));
  o.run_id = Get(raw, "rdzv_id");
  o.local_addr = Get(raw, "local_addr");
  o.master_addr = Get(raw, "master_addr");
  DDP_RETURN_IF_ERROR(ParseInt(raw, "node_rank", 0, &o.node_rank));
  DDP_RETURN_IF_ERROR(ParseInt(raw, "master_port", 0, &o.master_port));
  if (o.master_port > 65535) return Invalid("master_port", "must be in [0, 65535]");
  DDP_RETURN_IF_ERROR(ParseRendezvousConf(Get(raw, "rdzv_conf"), &o, &c->warnings));
  std::string backend = Get(raw, "rdzv_backend");
  std::string endpoint = Get(raw, "rdzv_endpoint");
  const bool standalone = Given(raw, "standalone");
  if (standalone && o.nnodes > 1) {
    return Invalid("standalone", absl::StrCat("is a one-node job, but --nnodes=", Get(raw, "nnodes")));
  }
  // torchrun: --standalone, or a one-node static job without --master_port or --rdzv_endpoint, becomes a
  // c10d rendezvous on a free local port with a random run id.
  if (standalone || (backend == "static" && endpoint.empty() && !Given(raw, "master_port") && o.nnodes == 1)) {
    backend = "c10d";
    endpoint = "localhost:0";
    o.run_id = RandomUuid();
  }
  if (backend == "etcd" || backend == "etcd-v2") {
    return Invalid("rdzv_backend", absl::StrCat(backend, " is not supported by ddprun: it needs an etcd server; "
                                                "use c10d (ddprun's own store at --rdzv_endpoint)"));
  }
  if (backend == "static") {
    o.rdzv_backend = RendezvousBackend::kStatic;
    if (o.min_nodes != o.nnodes) {
      return Invalid("nnodes", absl::StrCat(Get(raw, "nnodes"), " is a range, which needs --rdzv_backend=c10d "
                                            "(a static rendezvous has a fixed number of nodes)"));
    }
    if (!endpoint.empty()) DDP_RETURN_IF_ERROR(ParseEndpoint(endpoint, o.master_port, &o.master_addr, &o.master_port));
    if (o.node_rank >= o.nnodes) {
      return Invalid("node_rank", absl::StrCat(o.node_rank, " is not in [0, --nnodes=", o.nnodes, ")"));
    }
    return absl::OkStatus();
  }
  if (backend != "c10d") return Invalid("rdzv_backend", absl::StrCat("expected static or c10d, got \"", backend, "\""));
  o.rdzv_backend = RendezvousBackend::kC10d;
  if (endpoint.empty()) return Invalid("rdzv_endpoint", "--rdzv_backend=c10d needs HOST[:PORT] where the nodes meet");
  DDP_RETURN_IF_ERROR(ParseEndpoint(endpoint, 29400, &o.rdzv_host, &o.rdzv_port));
  if (o.rdzv_port == 0 && o.nnodes > 1) {
    return Invalid("rdzv_endpoint", "port 0 (a free port) works only for a one-node job (--nnodes=1)");
  }
  if (Given(raw, "node_rank") && o.node_rank != 0) {
    c->warnings.push_back("--node_rank is only used for static rdzv_backend. It will be ignored for "
                          "rdzv_backend=c10d (node ranks are given at the rendezvous).");
  }
  o.node_rank = 0;
  return absl::OkStatus();
}

// Output and logging: --log_dir, --redirects, --tee, --local_ranks_filter, --log_line_prefix_template,
// --duplicate_*_filters, --redirect.
absl::Status FinalizeOutput(const RawFlags& raw, const std::map<std::string, std::string>& env, LaunchOptions* o) {
  o->log_dir = Get(raw, "log_dir");
  DDP_ASSIGN_OR_RETURN(o->redirects, ParseStdStreams("redirects", Get(raw, "redirects")));
  DDP_ASSIGN_OR_RETURN(o->tee, ParseStdStreams("tee", Get(raw, "tee")));
  for (absl::string_view item : absl::StrSplit(Get(raw, "local_ranks_filter"), ',', absl::SkipEmpty())) {
    int rank = 0;
    if (!absl::SimpleAtoi(item, &rank) || rank < 0) {
      return Invalid("local_ranks_filter", absl::StrCat("expected local ranks like 0,1,2, got \"",
                                                         Get(raw, "local_ranks_filter"), "\""));
    }
    o->local_ranks_filter.push_back(rank);
  }
  o->console.log_line_prefix_template = Get(raw, "log_line_prefix_template");
  if (!Given(raw, "log_line_prefix_template")) {
    auto it = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE");  // torchrun's fallback
    if (it != env.end()) o->console.log_line_prefix_template = it->second;
  }
  if (Given(raw, "duplicate_stdout_filters")) {
    o->console.duplicate_stdout_filters = ParseDuplicateFilters(Get(raw, "duplicate_stdout_filters"));
  }
  if (Given(raw, "duplicate_stderr_filters")) {
    o->console.duplicate_stderr_filters = ParseDuplicateFilters(Get(raw, "duplicate_stderr_filters"));
  }
  if (!ParseRedirectMode(Get(raw, "redirect"), &o->redirect)) {
    return Invalid("redirect", absl::StrCat("must be all, errors or none, not \"", Get(raw, "redirect"), "\""));
  }
  return absl::OkStatus();
}

// Which file `name` runs as (exec's rules): itself when it has a '/', else the first match in PATH.
std::optional<std::string> FindProgram(const std::string& name, const std::map<std::string, std::string>& env) {
  const auto executable = [](const std::string& path) {
    struct stat st = {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return name;
    return std::nullopt;
  }
  auto path = env.find("PATH");
  const std::string dirs = path == env.end() ? "/usr/local/bin:/usr/bin:/bin" : path->second;
  for (absl::string_view dir : absl::StrSplit(dirs, ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", name);
    if (executable(candidate)) return candidate;
  }
  return std::nullopt;
}

// The script-running flags: -m, --no_python, --run_path.
absl::Status FinalizeCommand(const RawFlags& raw, const std::vector<std::string>& script_and_args,
                             const std::map<std::string, std::string>& env, LaunchOptions* o) {
  if (script_and_args.empty()) {
    return absl::InvalidArgumentError("no script to run was given (ddprun [flags] script.py [args...])");
  }
  ScriptMode mode;
  mode.module = Given(raw, "module");
  mode.no_python = Given(raw, "no_python");
  mode.run_path = Given(raw, "run_path");
  DDP_ASSIGN_OR_RETURN(o->command, ResolveWorkerCommand(script_and_args, mode, env));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ResolveWorkerCommand(const std::vector<std::string>& script_and_args,
                                                              const ScriptMode& mode,
                                                              const std::map<std::string, std::string>& env) {
  if (script_and_args.empty()) return absl::InvalidArgumentError("no script to run was given");
  const std::string& script = script_and_args[0];
  const std::vector<std::string> args(script_and_args.begin() + 1, script_and_args.end());
  auto exec = env.find("PYTHON_EXEC");
  const std::string python = exec != env.end() && !exec->second.empty() ? exec->second : "python3";
  const auto with_python = [&](std::vector<std::string> head) -> absl::StatusOr<std::vector<std::string>> {
    if (!FindProgram(python, env).has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the script ", script, " runs with Python, but ", python,
          exec != env.end() ? " (PYTHON_EXEC)" : " (on PATH)",
          " is not an executable; set PYTHON_EXEC to the interpreter, or give --no_python to run it as a program"));
    }
    std::vector<std::string> command = {python, "-u"};
    command.insert(command.end(), head.begin(), head.end());
    command.insert(command.end(), args.begin(), args.end());
    return command;
  };
  if (mode.run_path) {
    if (!absl::StartsWith(script, "/")) {
      return absl::InvalidArgumentError(absl::StrCat("--run_path needs an absolute script path, got ", script));
    }
    return with_python({"-c",
                        "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')",
                        script});
  }
  if (mode.module) {
    if (mode.no_python) return absl::InvalidArgumentError("give --no_python or -m (--module), not both");
    return with_python({"-m", script});
  }
  if (mode.no_python) return script_and_args;
  // Note [Which interpreter]
  if (!absl::EndsWith(script, ".py") && FindProgram(script, env).has_value()) return script_and_args;
  struct stat st = {};
  if (::stat(script.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the script ", script, " does not exist (nor is it a program on PATH); give --no_python to run a program "
        "that appears later, or -m for a Python module"));
  }
  return with_python({script});
}

absl::StatusOr<int> ResolveNprocPerNode(absl::string_view text, const LocalDevices& devices) {
  int n = 0;
  if (absl::SimpleAtoi(text, &n)) {
    if (n < 1 || n > kMaxProcPerNode) {
      return absl::InvalidArgumentError(
          absl::StrCat("--nproc_per_node must be in [1, ", kMaxProcPerNode, "] (workers on this node), got ", n));
    }
    return n;
  }
  if (text == "cpu") return std::max(1, devices.cpus);
  if (text == "gpu") {
    if (devices.gpus < 1) return Invalid("nproc_per_node", "gpu: no CUDA device is visible on this node");
    return devices.gpus;
  }
  if (text == "auto") return devices.gpus > 0 ? devices.gpus : std::max(1, devices.cpus);
  if (text == "xpu") return Invalid("nproc_per_node", "xpu is not supported by ddprun (no Intel GPU support)");
  return Invalid("nproc_per_node", absl::StrCat("expected N, cpu, gpu or auto, got \"", text, "\""));
}

absl::StatusOr<DdprunCommandLine> ParseDdprunCommandLine(const std::vector<std::string>& argv,
                                                         const std::map<std::string, std::string>& env,
                                                         const LocalDevices& devices) {
  DdprunCommandLine c;
  RawFlags raw;
  DDP_RETURN_IF_ERROR(ReadPetVariables(env, &raw));
  DDP_ASSIGN_OR_RETURN(const size_t script_at, ReadFlags(argv, &raw));
  if (Given(raw, "help")) {
    c.help = true;
    return c;
  }
  LaunchOptions& o = c.options;
  DDP_RETURN_IF_ERROR(FinalizeRendezvous(raw, &c));
  DDP_ASSIGN_OR_RETURN(o.nproc_per_node, ResolveNprocPerNode(Get(raw, "nproc_per_node"), devices));
  DDP_RETURN_IF_ERROR(ParseInt(raw, "max_restarts", 0, &o.max_restarts));
  o.elastic.enabled = Given(raw, "elastic");
  DDP_RETURN_IF_ERROR(ParseInt(raw, "min_world_size", 1, &o.elastic.min_world_size));
  if (Given(raw, "min_world_size") && !o.elastic.enabled) {
    return Invalid("min_world_size", "bounds an elastic job's size; it needs --elastic");
  }
  DDP_RETURN_IF_ERROR(ParseSeconds("monitor_interval", Get(raw, "monitor_interval"), false, &o.monitor_interval));
  o.role = Get(raw, "role");
  if (o.role.empty()) return Invalid("role", "must not be empty");
  DDP_RETURN_IF_ERROR(ParseSignals(Get(raw, "signals_to_handle"), &o));
  DDP_RETURN_IF_ERROR(FinalizeOutput(raw, env, &o));
  o.virtual_local_rank = Given(raw, "virtual_local_rank");
  if (o.virtual_local_rank) {
    DDP_RETURN_IF_ERROR(CheckVirtualLocalRank(o.nproc_per_node, [&env](const std::string& name) {
      auto it = env.find(name);
      return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
    }));
  }
  const bool shutdown_given = Given(raw, "shutdown_timeout");
  if (shutdown_given && Given(raw, "grace_period_s")) {
    return absl::InvalidArgumentError("give --shutdown_timeout or --grace_period_s (the same setting), not both");
  }
  const std::string grace_name = shutdown_given ? "shutdown_timeout" : "grace_period_s";
  DDP_RETURN_IF_ERROR(ParseSeconds(grace_name, Get(raw, grace_name), true, &o.grace_period));
  o.job_token = Get(raw, "job_token");
  o.job_token_file = Get(raw, "job_token_file");
  const std::vector<std::string> script_and_args(argv.begin() + std::min(script_at, argv.size()), argv.end());
  DDP_RETURN_IF_ERROR(FinalizeCommand(raw, script_and_args, env, &o));
  return c;
}

std::string DdprunUsage() {
  std::string text =
      "ddprun [flags] [--] script.py [args...]     (torchrun's command line)\n"
      "ddprun [flags] [--] program [args...]       (a program: run as itself)\n"
      "Starts --nproc_per_node workers with torchrun's environment variables. A .py script (or -m module,\n"
      "or a file that is not executable) runs with $PYTHON_EXEC, else python3 on PATH. Flags may be\n"
      "spelled --flag_name or --flag-name, with =VALUE or a separate VALUE; PET_<FLAG> variables give\n"
      "defaults. Details and the parity table with torchrun: docs/launch.md.\n\nFlags:\n";
  for (const FlagSpec& f : kFlags) {
    std::string spelling = absl::StrCat("--", f.name);
    if (f.short_name != 0) spelling = absl::StrCat("-", std::string(1, f.short_name), ", ", spelling);
    absl::StrAppend(&text, "  ", spelling, f.takes_value ? " VALUE" : "", "\n      ", f.help);
    if (f.takes_value && *f.default_text != '\0') absl::StrAppend(&text, " Default: ", f.default_text, ".");
    absl::StrAppend(&text, "\n");
  }
  absl::StrAppend(&text, "\ntorchrun flags that ddprun refuses:\n");
  for (const RejectedFlag& r : kRejected) absl::StrAppend(&text, "  --", r.name, ": ", r.why, "\n");
  return text;
}

}  // namespace ddp

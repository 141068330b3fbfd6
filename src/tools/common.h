// Pieces shared by the subcommands: printing what a load did, checks of
// common flags, sampling flags, reading text files, writing stdout. What a
// model runs on is engine/runtime.h's, its flags runtime_flags.h's.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/units.h"
#include "engine/runtime.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "model/loader.h"
#include "model/model.h"
#include "text/chat_template.h"
#include "tools/args.h"

namespace weir::tools {

using weir::seconds_since;

// All online CPUs (engine/runtime.h).
using weir::default_threads;

// Loads a model and reports the time to stderr; errors name the path.
std::unique_ptr<Model> load_model(const std::string& path, double* seconds = nullptr);

// --numa MODE for the CPU backend (off | distribute | isolate); throws a
// UsageError naming the flag for anything else.
cpu::NumaMode parse_numa_flag(const std::string& s);
// After the first graph is planned: the plan and where weights went, on
// stderr (nothing when NUMA is off).
void report_numa(const Backend& b);

// --temp, --top-k, --top-p, --min-p (run and chat).
void add_sampling_flags(Args& a, SamplerParams* sp);
// UsageError naming the sampling flag out of range.
void check_sampling(const SamplerParams& sp);
// The sampler flags' values for sampling on the backend, with this seed.
BackendSampling backend_sampling(const SamplerParams& sp, uint64_t seed);
// --chat-template-file's template when given, else the model's own or a
// built-in one (ChatTemplate::for_model; throws Error when there is none).
ChatTemplate chat_template_for(const Model& m, const std::string& template_file);

// Throws Error when m only makes embeddings (a BERT encoder), for the
// commands that generate or score text: `command` names the one refusing.
void refuse_embeddings_only(const Model& m, const std::string& command);
// A progress bar for a load, on stderr when it is a terminal and the load
// takes over a second (bytes, GB/s, time left); nothing otherwise.
std::function<void(const LoadProgress&)> load_progress_bar();

// The first non-finite value of a row of logits, or -1 when all are finite.
int64_t first_non_finite(const float* logits, int64_t n);
// -log softmax(logits)[target], in double (perplexity's and imatrix's score).
double token_nll(const float* logits, int64_t n, int32_t target);

// "NVIDIA H100 80GB HBM3" for --device d, or "" when there is none.
std::string gpu_name(int device);

// --threads: at least 1 and at most kMaxThreads (more would only fail to
// start, or crawl); a UsageError names the flag.
constexpr int kMaxThreads = 1024;
void check_threads(int threads, const std::string& flag = "--threads");

// The text of a prompt or text file given by `flag` (-f): a regular file, a
// pipe or a terminal (/dev/stdin, <(cmd)); a directory, a missing or
// unreadable file, or more than kMaxTextBytes is an error naming the flag
// and path. A FIFO with no writer reads as empty, never blocks forever.
constexpr size_t kMaxTextBytes = size_t(1) << 30;
std::string read_text_file(const std::string& path, const std::string& flag);

// Writes to stdout; a failed write (a full disk, a closed pipe) throws an
// Error naming standard output.
void write_stdout(const void* data, size_t n);
inline void write_stdout(const std::string& s) { write_stdout(s.data(), s.size()); }

}  // namespace weir::tools

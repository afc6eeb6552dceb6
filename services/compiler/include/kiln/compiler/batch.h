// Several parameter sets of one CUDA source built as one translation unit.
//
// A CUDA build spends most of its CPU on the headers every kernel includes (cuda_runtime.h and the C++
// library behind it), parsed three times: by cudafe++, by cicc and by the host compiler. The tuner's
// candidates differ only in their -D values, so one translation unit holding K variants, each in a
// namespace of its own with its defines set around an #include of the source, parses those headers once
// for all K. Each variant's kiln_entry is renamed kiln_entry_v<i>; a shared object per variant links the
// one object with a stub whose kiln_entry calls that variant's.
//
// A namespace is not the global scope: a source that declares C-linkage names besides kiln_entry,
// includes a file of its own, or reopens itself with #pragma once is not batched (batchable says why).
// Name lookup inside a namespace can still differ from the global scope's in corner cases (a function of
// the source hiding a header's overloads of the same name), so a batched build serves exploration only:
// a confirmation, the build whose measurement promotion rests on, is always built alone.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/status.h"

namespace kiln::compiler {

using Defines = std::map<std::string, std::string>;

// The source as the preprocessor reads its directives: backslash-newlines removed, each comment replaced by
// one blank (a block comment's newlines with it). String and character literals are kept as they are.
std::string preprocessor_text(std::string_view source);

// What batching needs to know of a source: its #include targets in order (as written, "<x>" or "\"x\"")
// and the macro names it #defines or #undefs anywhere (conditionally or not).
struct SourceDirectives {
  std::vector<std::string> includes;
  std::vector<std::string> defined;
};
SourceDirectives source_directives(std::string_view source);
// The same of a text already through preprocessor_text.
SourceDirectives preprocessed_directives(std::string_view text);

// OK when `source` can be one variant among several of a batch with these parameter names; otherwise
// failed_precondition naming the first reason.
Status batchable(std::string_view source, const std::vector<std::string>& param_names);

// The name a variant's kiln_entry gets in the batch, and the namespace its code lives in.
std::string variant_entry(size_t index);
std::string variant_namespace(size_t index);

// The translation unit building every one of `variants` of the file `source_name` (beside it in the build
// folder). Call batchable first.
std::string batch_unit(std::string_view source_name, std::string_view source, const std::vector<Defines>& variants);

// A C source whose exported kiln_entry calls variant `index`'s (linked into that variant's shared object).
std::string variant_stub(size_t index);

// How many builds a batch should hold on average, given the builds in flight in this compiler, the cores
// it may run on and the cores one build keeps busy (nvcc's steps as a graph: about 1.5; nvcc itself: 1).
// A batch costs less CPU per build but takes longer than any one build alone, so it pays only when the
// builds in flight would crowd the cores: the share that brings their demand, in_flight x cores_per_build
// / share, within kBatchBusyTarget of the cores; 1 (each alone) while it already is; never more than
// batch_max. Not a whole number where whole batch sizes would leave cores idle (BatchSizer mixes two).
//
// The target is what 16-core H200 hosts measured (bench/compile/README.md; a build alone: 1.26-1.45
// builds/s): each regime did best at about 12 cores of demand. Builds alone at 8 in flight: 8.57-10.5
// builds/s; at 16: 10.9 (24 cores asked). Pairs at 16: 13.7-18.2. Batches of four at 32: 20.3-27.4;
// threes at 32 (16 cores asked): 16.7, CPU-bound. Batches of four at 4 in flight: 2.9, where builds alone
// made 5.1-6.3.
inline constexpr double kBatchBusyTarget = 0.75;
double batch_share(int in_flight, int cores, double cores_per_build, int64_t batch_max);

// The size of each batch as it opens, so that the sizes average the share they are given: a share of 1.6
// makes three batches of two for every two builds alone (error diffusion, in the order batches open).
class BatchSizer {
 public:
  size_t next(double share);
  // The whole part of a share (at least 1): the size every batch it calls for should reach.
  static size_t whole(double share);

 private:
  double carried_ = 0;  // the share's fractional part not yet given out as a larger batch
};

// ptxas -v's report of a batch cut per variant: the lines that describe the variant's own functions, and
// the lines that describe no function (so parse_ptxas_usage reads each variant's resource usage alone).
std::vector<std::string> ptxas_log_by_variant(std::string_view log, size_t variants);

}  // namespace kiln::compiler

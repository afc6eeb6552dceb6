#include "kiln/llm/prompt.h"

#include <cstdio>

#include "kiln/core/hash.h"
#include "kiln/llm/extract.h"
#include "kiln/llm/hardware.h"
#include "kiln/task/task.h"

namespace kiln::llm {

namespace {

// Prompts carry sources and logs; these caps keep one prompt within a small model's context.
constexpr size_t kMaxSourceBytes = 24 * 1024;
constexpr size_t kMaxLogBytes = 2048;
constexpr size_t kMaxInspirationBytes = 8 * 1024;
constexpr size_t kMaxStrategyBytes = 4096;

std::string capped(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  return text.substr(0, max_bytes) + "\n... [truncated]\n";
}

std::string shape_string(const task::TensorSpec& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + t.shape[i];
  return s + "]";
}

std::string score_string(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

// What a prompt shows of a program for ideas: its editable regions, each between its own markers when
// the kernel has several.
std::string editable_text(const std::string& code) {
  auto bodies = task::region_bodies(code);
  if (!bodies.is_ok()) return code;
  if (bodies->size() == 1) return bodies->front();
  std::string out;
  for (const auto& body : *bodies)
    out += "// " + std::string(task::kEvolveStart) + "\n" + body + "// " + std::string(task::kEvolveEnd) + "\n";
  return out;
}

}  // namespace

const std::string& default_strategy() {
  static const std::string kStrategy =
      "## Strategy\n"
      "- Read the parent's feedback first: fix a failure before optimizing.\n"
      "- Keep the kernel correct for every shape listed, including sizes that are not multiples of your\n"
      "  block, tile or vector width.\n"
      "- Optimize memory traffic first (coalesced and vectorized access, reuse through caches or shared\n"
      "  memory), then parallelism (enough independent work per core or SM), then arithmetic (unrolling,\n"
      "  fused multiply-add, intrinsics).\n"
      "- Change one or two things per attempt so the feedback tells what helped.\n";
  return kStrategy;
}

std::string strategy_id(const std::string& text) { return "s-" + sha256_hex(text).substr(0, 12); }

Result<std::vector<Message>> proposal_messages(const proto::ProposalRequest& req, const task::TaskSpec& spec,
                                               const proto::FileMap& files, const std::string& strategy,
                                               const PromptContext& ctx) {
  for (const std::string& name : {spec.kernel_file, spec.reference_file})
    if (!files.count(name)) return invalid_argument("prompt: the task package has no " + name);
  const std::string tag(proto::kernel_language(spec.backend));
  const std::string lang = spec.backend == proto::Backend::kCuda ? "CUDA C++" : "C++ (OpenMP available)";

  // Every region is asked for: the reply's bodies replace all of them (extract.h).
  const std::string& kernel = files.at(spec.kernel_file).data;
  auto regions = task::find_regions(kernel);  // parse_task has checked them
  const size_t n_regions = regions.is_ok() ? regions->size() : 1;
  const std::string rules =
      n_regions == 1
          ? "Only the code between the [EVOLVE_START] and [EVOLVE_END] markers\n"
            "may change; everything outside it, the reference and the tests stay as they are."
          : "The kernel has " + std::to_string(n_regions) +
                " editable regions, each between an [EVOLVE_START]\n"
                "line and an [EVOLVE_END] line. Only the code inside them may change; everything outside them, the\n"
                "reference and the tests stay as they are.";
  const std::string answer =
      n_regions == 1 ? "holding the new\ncontent of the editable region (you may include the two marker lines)."
                     : "holding the new\ncontent of all " + std::to_string(n_regions) +
                           " editable regions, in order, each between its own `// [EVOLVE_START]` and\n"
                           "`// [EVOLVE_END]` lines (a region you keep is copied as it is).";
  std::string system =
      "You are an expert performance engineer who writes fast, correct " + lang +
      " kernels.\n"
      "You improve one kernel at a time. " +
      rules +
      " The kernel exports\n"
      "`extern \"C\" int kiln_entry(const kiln_args*)` (kiln/kernel_abi.h) and must not synchronize the device.\n"
      "Answer with a short explanation and then exactly one fenced ```" +
      tag + " code block " + answer + "\n\n" + capped(strategy, kMaxStrategyBytes);

  std::string user = "# Task: " + spec.name + " (op " + spec.op + ", backend " +
                     std::string(proto::name(spec.backend)) + ", dtype " + spec.dtype + ")\n\n## Tensors\n";
  for (const auto& t : spec.inputs)
    user += "- input " + t.name + ": " + std::string(task::dtype_name(t.dtype)) + " " + shape_string(t) + "\n";
  for (const auto& t : spec.outputs)
    user += "- output " + t.name + ": " + std::string(task::dtype_name(t.dtype)) + " " + shape_string(t) + "\n";
  for (const auto& [name, value] : spec.scalars) user += "- scalar " + name + " = " + std::to_string(value) + "\n";
  user += "\n## Shapes\nCorrectness cases:";
  for (const auto& c : spec.correctness_cases) user += " {" + task::dims_string(c) + "}";
  user += "\nBenchmark cases (timed):";
  for (const auto& c : spec.benchmark_cases) user += " {" + task::dims_string(c) + "}";
  user += "\nTolerance: rtol " + std::to_string(spec.rtol) + ", atol " + std::to_string(spec.atol) + "\n";
  if (!spec.params.empty()) {
    user += "Template parameters (passed as -D defines):";
    for (const auto& [name, values] : spec.params) {
      user += " " + name + " in {";
      for (size_t i = 0; i < values.size(); ++i) user += (i ? "," : "") + values[i];
      user += "}";
    }
    user += "\n";
  }
  user += "\n## Reference (" + spec.reference_file + ")\n```" + tag + "\n" +
          capped(files.at(spec.reference_file).data, kMaxSourceBytes) + "```\n";
  if (!spec.instructions.empty()) user += "\n## Instructions\n" + capped(spec.instructions, kMaxSourceBytes) + "\n";

  user += "\n## Hardware\n" + hardware_summary(spec.backend, ctx.gpu_name);

  const std::string& parent_code = req.parent.code.empty() ? kernel : req.parent.code;
  user += "\n## Current kernel (" + (req.parent.program_id.empty() ? std::string("program 0") : req.parent.program_id) +
          (req.parent_cell.empty() ? "" : ", cell " + req.parent_cell) + ")\n```" + tag + "\n" +
          capped(parent_code, kMaxSourceBytes) + "```\n";
  if (!req.parent.params.empty()) {
    user += "Built with:";
    for (const auto& [k, v] : req.parent.params) user += " -D" + k + "=" + v;
    user += "\n";
  }
  user +=
      "\n## Feedback on the current kernel\n" +
      (req.parent_eval_log.empty() ? std::string("(not evaluated yet)") : capped(req.parent_eval_log, kMaxLogBytes)) +
      "\n";

  if (!req.inspirations.empty()) {
    user += "\n## Other kernels from the archive, for ideas\n";
    for (const auto& insp : req.inspirations) {
      user += "### " + insp.cand.program_id + " (score " + score_string(insp.combined_score) +
              (insp.cell.empty() ? "" : ", cell " + insp.cell) + ")\n```" + tag + "\n" +
              capped(editable_text(insp.cand.code), kMaxInspirationBytes) + "```\n" +
              capped(insp.eval_log, kMaxLogBytes / 2) + "\n";
    }
  }
  if (!req.target_cell.empty()) {
    user +=
        "\n## Direction\nThe archive keeps the best kernel per combination of optimization levels (0-3) for\n"
        "memory, compute and parallelism techniques. Aim for the cell " +
        req.target_cell + ": move the levels toward it while making the kernel faster.\n";
  }
  user += n_regions == 1 ? "\nWrite the new editable region now.\n"
                         : "\nWrite the new content of all " + std::to_string(n_regions) +
                               " editable regions now, each between its markers.\n";
  return std::vector<Message>{{"system", system}, {"user", user}};
}

std::vector<Message> strategy_rewrite_messages(const proto::PromptStrategy& current, const std::string& current_text) {
  std::string history;
  for (double s : current.history) history += (history.empty() ? "" : ", ") + score_string(s);
  std::string system =
      "You improve the strategy section of a prompt that guides an LLM writing high-performance kernels.\n"
      "Scores: 0 no code, 1 build failed, 2 crashed, 3 wrong shape, 4 wrong values, 5 correct, plus the\n"
      "speedup over the reference for a correct kernel. Keep what worked, drop what did not, stay under\n"
      "40 lines. Answer with the new section only, in one fenced ```markdown block starting with\n"
      "\"## Strategy\".";
  std::string user = "Current strategy (" + (current.prompt_id.empty() ? std::string("built-in") : current.prompt_id) +
                     "):\n```markdown\n" + capped(current_text, kMaxStrategyBytes) + "```\n" +
                     "Times used: " + std::to_string(current.uses) + "; best score: " + score_string(current.fitness) +
                     "; scores of its kernels, oldest first: " + (history.empty() ? "(none yet)" : history) + "\n";
  return {{"system", system}, {"user", user}};
}

Result<std::string> strategy_from_reply(const ChatReply& reply) {
  std::string text;
  auto block = last_fenced_block(reply.content, reply.finish_reason);
  if (block.is_ok())
    text = *block;
  else if (block.status().message() == "no fenced code block in the reply")
    text = reply.content;
  else
    return block.status().with_context("strategy rewrite");
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  size_t start = text.find_first_not_of(" \n");
  if (start == std::string::npos) return invalid_argument("strategy rewrite: empty reply");
  text = text.substr(start) + "\n";
  if (text.size() > kMaxStrategyBytes)
    return invalid_argument("strategy rewrite: longer than " + std::to_string(kMaxStrategyBytes) + " bytes");
  return text;
}

}  // namespace kiln::llm

// `attnscope inspect PATH`: lists what a checkpoint holds. Its options here; the listing,
// text or JSON, is the report layer's (report/inspect_report.hpp).
#include <algorithm>
#include <cstddef>
#include <iostream>
#include <memory>
#include <string>

#include "attnscope/base/errors.hpp"
#include "attnscope/io/checkpoint.hpp"
#include "attnscope/model/checkpoint_layer.hpp"
#include "attnscope/report/inspect_report.hpp"
#include "help.hpp"
#include "run.hpp"
#include "subcommand.hpp"

namespace attnscope::cli {
namespace {

struct InspectArgs {
    std::string path;
    std::string preset = "auto";
    bool json = false;
    LimitOptions limits;             // --max-memory only: the limit of a run, read as run reads it
    const CLI::App* root = nullptr;  // spells the fields of the run commands shown
};

// What a listing holds without --max-memory: a header, an index, a pickle and the names
// of the tensors (a real checkpoint's take a few megabytes), never the tensors
// themselves. A 3 MB torch.save whose pickle inflates to gigabytes is refused at this.
constexpr std::size_t kListingBound = std::size_t(1) << 30;

int run_inspect(const InspectArgs& a) {
    std::size_t limit = memory_limit(a.limits);
    if (a.limits.max_memory.empty()) limit = std::min(limit, kListingBound);
    const Checkpoint c = open_checkpoint(a.path, limit);
    const CheckpointOverview ov = describe_checkpoint(c, a.preset);
    const CLI::App& root = *a.root;
    const FlagSpelling flag = [&root](const std::string& field) { return flag_of(root, field); };
    if (a.json)
        write_inspect_json(std::cout, c, ov, flag);
    else
        write_inspect_text(std::cout, c, ov, flag);
    std::cout.flush();
    if (!std::cout) throw RuntimeFailure("<stdout>: cannot write the listing");
    return 0;
}

}  // namespace

Subcommand setup_inspect_command(CLI::App& parent) {
    auto a = std::make_shared<InspectArgs>();
    a->root = &parent;
    CLI::App* cmd = parent.add_subcommand(
        "inspect",
        "List what a checkpoint holds: tensors by layer (name, dtype, shape, bytes), the preset, and each layer's "
        "attention configuration; a GGUF file's metadata and its tensors' types and offsets");
    cmd->add_option("path", a->path,
                    "A .safetensors file, model.safetensors.index.json, a torch.save file, a .gguf file, or a "
                    "directory")
        ->required();
    cmd->add_option("--preset", a->preset, "auto (config.json's model_type), " + preset_names())
        ->capture_default_str()
        ->group(kCheckpoint);
    cmd->add_flag("--json", a->json, "Print one JSON document")->group(kOutputs);
    a->limits.add(*cmd, {"Refuse checkpoints whose listing needs more memory than this (e.g. 8G, 512M; default 1G, "
                         "or 3/4 of physical memory when less)",
                         nullptr});
    return {cmd, [a] { return run_inspect(*a); }};
}

}  // namespace attnscope::cli

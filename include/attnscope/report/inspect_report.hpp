// attnscope — report: what a checkpoint holds (`attnscope inspect`), as text for a person
// and as one JSON document for a script. Reads nothing but the overview
// (model/checkpoint_layer.hpp: describe_checkpoint); no tensor's data.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

#include "attnscope/io/checkpoint.hpp"
#include "attnscope/model/checkpoint_layer.hpp"

namespace attnscope {

// How the command line spells an option's field ("checkpoint" -> "--checkpoint"): the
// report knows no flags, and the commands it shows (run_command) name options by field.
using FlagSpelling = std::function<std::string(const std::string& field)>;

// The path, container, tensor count and bytes; the config and the preset; the command that
// runs the first attention layer; then each group (a numbered layer) with its attention's
// configuration and its tensors in columns (name, dtype and shape, bytes). Escaped
// (escape_control).
void write_inspect_text(std::ostream& out, const Checkpoint& c, const CheckpointOverview& ov, const FlagSpelling& flag);

// One document (attnscope.inspect/1), indented by 2, streamed: the tensors (its last
// member) are written one by one, so that a million of them never sit in memory twice.
void write_inspect_json(std::ostream& out, const Checkpoint& c, const CheckpointOverview& ov, const FlagSpelling& flag);

}  // namespace attnscope

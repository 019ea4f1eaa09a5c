// `attnscope run` for long contexts (long_run.hpp).
#include "long_run.hpp"

#include <iostream>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/json_writer.hpp"
#include "attnscope/report/summary_report.hpp"

namespace attnscope::cli {

JsonlOutput::JsonlOutput(const std::string& path, bool force, std::string source, const Dims& dims, bool batched)
    : out_(&std::cout), source_(std::move(source)), dims_(dims), batched_(batched) {
    if (path != "-") {
        check_output_target(path, force, "{jsonl} " + path);  // before any work
        file_ = std::make_unique<AtomicTextFile>(path, force);
        out_ = file_.get();
    }
}

void JsonlOutput::header(const Summary* s) {
    if (started_) return;
    started_ = true;
    write_jsonl_header(*out_, source_, dims_, batched_, s, layer_);
}

void JsonlOutput::rows(const Summary& s, std::size_t b, std::size_t h, std::size_t i0, std::size_t n) {
    std::lock_guard<std::mutex> g(lock_);
    header(&s);
    write_jsonl_rows(*out_, s, batched_, b, h, i0, n, layer_);
    if (!file_) out_->flush();  // a pipe reader sees rows as they come
}

void JsonlOutput::start_layer(std::size_t layer, const Dims& dims) {
    std::lock_guard<std::mutex> g(lock_);
    layer_ = layer;
    dims_ = dims;
    started_ = false;
}

void JsonlOutput::add_stages(const TraceView& view, const std::vector<std::string>& stages, const Summary* s) {
    std::lock_guard<std::mutex> g(lock_);
    header(s);
    for (const auto& name : stages) write_jsonl_stage(*out_, view.stage(name), batched_, layer_);
    if (s) write_jsonl_heads(*out_, *s, batched_, layer_);
    out_->flush();
}

void JsonlOutput::complete(const Predictions* predictions) {
    std::lock_guard<std::mutex> g(lock_);
    if (predictions) {
        JsonWriter w(*out_);  // one line
        w.begin_object().key("schema").value("attnscope.jsonl/1").key("kind").value("predictions");
        write_predictions_json(w, *predictions);
        w.end_object();
        *out_ << '\n';
    }
    out_->flush();
    if (file_)
        file_->commit();
    else if (!*out_)
        throw RuntimeFailure("<stdout>: cannot write the line-delimited JSON");
}

}  // namespace attnscope::cli

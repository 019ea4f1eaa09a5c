// `attnscope lesson`'s runs: computed in this process for the questions, run as this same
// program for the output shown; and its scratch folder (src/cli/lesson.hpp).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "attnscope/base/errors.hpp"
#include "attnscope/base/text.hpp"
#include "attnscope/core/attention.hpp"
#include "attnscope/report/report.hpp"
#include "lesson.hpp"

extern char** environ;

namespace attnscope::cli::lesson {

std::string self_path() {
    std::error_code ec;
    const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) throw RuntimeFailure("lesson: cannot find this program (/proc/self/exe): " + ec.message());
    return p.string();
}

Captured capture(const Args& args) {
    static const std::string self = self_path();
    int fds[2];
    if (::pipe(fds) != 0) throw RuntimeFailure("lesson: pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", 0, 0);
    std::vector<std::string> argv_s = {self};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, self.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    Captured c;
    if (rc != 0) {
        ::close(fds[0]);
        throw RuntimeFailure("lesson: cannot run " + self);
    }
    char buf[65536];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) c.out.append(buf, std::size_t(n));
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    return c;
}

void run_quietly(const Args& args) {
    const Captured c = capture(args);
    if (c.code != 0) throw RuntimeFailure("lesson: a command failed: " + escape_control(c.out));
}

namespace {

// `run ARGS` parsed as the command line parses it (its options, a bundle's config).
RunOptions run_options(const Args& args) {
    CLI::App app;
    RunOptions o;
    CLI::App* run = setup_run(app, o);
    std::vector<std::string> reversed = {args.rbegin(), args.rend()};  // CLI11 reads them from the back
    reversed.push_back("run");
    app.parse(reversed);
    if (!run->parsed()) throw RuntimeFailure("lesson: not a run");
    o.validate();
    return o;
}

template <typename T>
Run compute_typed(const RunOptions& o, const Bundle& bundle, const Spec& spec, std::size_t limit) {
    Problem<T> problem = problem_of<T>(o, bundle, spec, limit);
    TextOptions chosen;  // the batch items and heads asked for must exist, as run checks them
    chosen.batches = o.batches, chosen.heads = o.heads_shown;
    check_selection(chosen, problem.dims);
    if (!problem.warnings.empty())  // a lesson's answers are read from its numbers
        throw InputError(escape_control(problem.warnings.front()) + " (a lesson needs finite inputs)");
    const StageSet keep = stage_set(parse_stage_list(o.stages)) & stages_of(problem);
    const auto a = attend_checked<T>(bundle, std::move(problem), keep, o.threads, limit);
    if (o.batches.empty() && o.heads_shown.empty()) return {held(a)};
    return {Held{select_view(a->view, o.batches, o.heads_shown), a}};
}

}  // namespace

Run compute(const Args& args) {
    const RunOptions o = run_options(args);
    Spec spec = spec_of(o);
    check_conflicts(o, Scope::run);
    const std::size_t limit = memory_limit(o);
    const Bundle bundle = load_inputs(o, limit, spec);
    return o.dtype == Precision::float32 ? compute_typed<float>(o, bundle, spec, limit)
                                         : compute_typed<double>(o, bundle, spec, limit);
}

double at(const Run& run, const std::string& stage, std::size_t b, std::size_t h, std::size_t i, std::size_t j) {
    const StageView& s = run.view().stage(stage);
    const std::size_t cols = s.shape.back();
    return s.at(matrix_offset(s, b, h) + i * cols + j);
}

std::size_t dim(const Run& run, const char* name) {
    const Dims& d = run.view().dims;
    const std::string n = name;
    for (const auto& [key, value] : {std::pair<const char*, std::size_t>{"Tq", d.Tq},
                                     {"Tk", d.Tk},
                                     {"Dm", d.Dm},
                                     {"H", d.H},
                                     {"Dk", d.Dk},
                                     {"Dv", d.Dv},
                                     {"Dout", d.Dout}})
        if (n == key) return value;
    throw std::logic_error("lesson: no dimension " + n);
}

std::string label(const Run& run, const char* side, std::size_t b, std::size_t i) {
    const TokenLabels& t = side[0] == 'q' ? run.view().query_tokens : run.view().key_tokens;
    if (t.empty()) return (side[0] == 'q' ? "q" : "k") + std::to_string(i);
    return escape_control(t[run.view().batched ? b : 0][i]);
}

// Four decimals, as the tables print; an exact zero as "0" (a masked key's weight), and a
// number four decimals would show as 0.0000 in scientific notation, so that a weight of
// 3e-07 is not read as exactly zero.
std::string num(double x) {
    char s[32];
    if (x == 0.0) return "0";
    std::snprintf(s, sizeof s, std::fabs(x) < 5e-5 ? "%.1e" : "%.4f", x);
    return s;
}

Args with(Args a, std::initializer_list<const char*> more) {
    a.insert(a.end(), more.begin(), more.end());
    return a;
}

// ---- the scratch folder ---------------------------------------------------------------
// Its name and the files made in it, in fixed storage, so that a signal handler can remove
// them with unlink and rmdir alone (async-signal-safe).

namespace {
constexpr std::size_t kPath = 4096, kFiles = 16;
char g_dir[kPath];
std::array<char[kPath], kFiles> g_files;
volatile sig_atomic_t g_count = 0;

void remove_all() {
    for (sig_atomic_t k = 0; k < g_count; ++k) ::unlink(g_files[std::size_t(k)]);
    if (g_dir[0]) ::rmdir(g_dir);
}

extern "C" void on_signal(int sig) {
    remove_all();
    ::signal(sig, SIG_DFL);
    ::raise(sig);
}
}  // namespace

std::string make_scratch() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/attnscope-lesson-XXXXXX";
    if (templ.size() + 64 >= kPath || !::mkdtemp(templ.data()))
        throw RuntimeFailure("lesson: cannot make a scratch folder in " + escape_control(templ));
    std::strcpy(g_dir, templ.c_str());
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, on_signal);
    return templ + "/";
}

// Registers `file` (in the scratch folder) for removal.
std::string Places::made(const std::string& file) {
    if (scratch.empty()) scratch = make_scratch();
    const std::string p = scratch + file;
    if (g_count >= sig_atomic_t(kFiles) || p.size() >= kPath) throw RuntimeFailure("lesson: too many scratch files");
    std::strcpy(g_files[std::size_t(g_count)], p.c_str());
    g_count = g_count + 1;
    return p;
}

std::string Places::at(const char* file) const { return (std::filesystem::path(data) / file).string(); }

void remove_scratch() {
    remove_all();
    g_count = 0;
    g_dir[0] = 0;
}

}  // namespace attnscope::cli::lesson

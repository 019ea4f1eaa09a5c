// .npy / .npz dumps of the chosen stages, every file committed only once all are written.
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "attnscope/base/errors.hpp"
#include "attnscope/report/report.hpp"

namespace attnscope {
namespace {

// Stages at least this large are computed in their files; smaller ones are written
// after the computation with np.save's 64-byte-aligned header.
constexpr std::size_t kPlaceMin = std::size_t{1} << 20;
constexpr std::size_t kPage = 4096;  // where a placed file's data starts

std::vector<OutArray> arrays_of(const TraceView& v, const std::vector<std::string>& stages) {
    std::vector<OutArray> out;
    for (const auto& name : stages) {
        const StageView& s = v.stage(name);
        out.push_back({s.name, s.shape, s.dtype, s.data});
    }
    return out;
}

// A file's data region mapped shared: what is stored there is the file's content.
class MappedRegion : public Placement {
   public:
    MappedRegion(void* data, std::size_t bytes) : data_(data), bytes_(bytes) {}
    ~MappedRegion() override { ::munmap(data_, bytes_); }
    void* data() const override { return data_; }
    std::size_t bytes() const override { return bytes_; }

   private:
    void* data_;
    std::size_t bytes_;
};

}  // namespace

bool dump_is_npz(const std::string& path) { return path.size() > 4 && path.compare(path.size() - 4, 4, ".npz") == 0; }

// How a directory dump reaches its path.
enum class DumpMode {
    fresh,     // the path is new: the dump is built in a temporary directory beside it,
               // which is renamed into place once complete (claiming the name)
    exchange,  // --force over an old dump directory: built beside it likewise, then the
               // two are exchanged at once and the old one removed
    into       // an existing directory without --force: files added one by one (none
               // exists yet; each is claimed)
};

struct Dump::Impl {
    std::string path;  // where the dump is to be
    std::string dir;   // where its files are written: path, or a temporary directory beside it
    std::vector<std::string> stages;
    DumpMode mode = DumpMode::into;
    bool npz = false, committed = false, replace = true;
    int slot = -1;                  // the temporary directory's, in the unfinished outputs
    std::vector<int> file_slots;    // its files', listed before they take their names
    std::vector<std::string> done;  // the files that took their names, until committed
    struct Placed {
        AtomicFile file;
        std::shared_ptr<Placement> region;
    };
    std::map<std::string, Placed> placed;
};

namespace {

// A new directory beside `path`, listed for the signal handlers before it exists.
std::string make_temp_dir(const std::string& path, int& slot) {
    static unsigned counter = 0;
    for (int attempt = 0;; ++attempt) {
        char suffix[32];
        std::snprintf(suffix, sizeof suffix, ".tmp-%06x",
                      (unsigned(::getpid()) * 2654435761u + counter++ * 40503u) & 0xffffffu);
        const std::string dir = path + suffix;
        slot = register_unfinished(dir, true);
        if (::mkdir(dir.c_str(), 0777) == 0) return dir;
        const int err = errno;
        unregister_unfinished(slot);
        slot = -1;
        if (err != EEXIST || attempt == 100)
            throw RuntimeFailure("{dump} " + path + ": cannot create directory: " + std::strerror(err));
    }
}

// The names in a directory that an attnscope dump would not hold (anything but STAGE.npy).
std::vector<std::string> foreign_entries(const std::string& dir) {
    std::vector<std::string> out;
    DIR* d = ::opendir(dir.c_str());
    if (!d) throw RuntimeFailure("{dump} " + dir + ": cannot read directory: " + std::strerror(errno));
    while (const dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        if (n == "." || n == "..") continue;
        const bool stage =
            n.size() > 4 && n.compare(n.size() - 4, 4, ".npy") == 0 && find_stage(n.substr(0, n.size() - 4));
        struct stat st {};
        if (!stage || ::lstat((dir + "/" + n).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) out.push_back(n);
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

// Removes a dump directory's stage files, then the directory (empty by then).
void remove_dump_dir(const std::string& dir) {
    for (const StageInfo& s : stage_table()) ::unlink((dir + "/" + std::string(s.name) + ".npy").c_str());
    ::rmdir(dir.c_str());
}

}  // namespace

Dump::Dump(std::string path, std::vector<std::string> stages, bool replace) : impl_(std::make_unique<Impl>()) {
    Impl& d = *impl_;
    d.replace = replace;
    d.path = std::move(path);
    d.stages = std::move(stages);
    d.npz = dump_is_npz(d.path);
    if (d.npz) return;
    const std::string found = describe_path(d.path);
    if (found == "absent") {
        d.mode = DumpMode::fresh;
    } else if (found != "a directory") {
        throw UsageError("{dump} " + d.path + ": exists and is not a directory (a dump is a directory or a .npz file)");
    } else if (replace) {
        // The old dump is replaced as a whole (no stale stage from an earlier run stays);
        // a directory holding anything else is not a dump to delete.
        const auto foreign = foreign_entries(d.path);
        if (!foreign.empty())
            throw UsageError("{dump} " + d.path +
                             ": {force} replaces a dump directory as a whole, and this one holds " + "other files (" +
                             foreign[0] + (foreign.size() > 1 ? ", ..." : "") + "); choose another directory");
        d.mode = DumpMode::exchange;
    } else {
        d.mode = DumpMode::into;
        // Refuse before writing anything when a target cannot be replaced by a file, so a
        // failed dump never leaves old and new stages mixed.
        for (const auto& name : d.stages)
            check_output_target(d.path + "/" + name + ".npy", false,
                                "{dump} " + d.path + ": " + d.path + "/" + name + ".npy");
    }
    d.dir = d.mode == DumpMode::into ? d.path : make_temp_dir(d.path, d.slot);
}

Dump::~Dump() {
    if (!impl_) return;
    Impl& d = *impl_;
    d.placed.clear();  // removes the uncommitted temporaries
    if (!d.committed) {
        if (d.mode != DumpMode::into && !d.dir.empty()) remove_dump_dir(d.dir);
        for (const auto& done : d.done) ::unlink(done.c_str());  // claimed by this run
    }
    for (int slot : d.file_slots) unregister_unfinished(slot);
    unregister_unfinished(d.slot);
}

std::shared_ptr<Placement> Dump::place(const std::string& name, std::size_t bytes) {
    Impl& d = *impl_;
    if (d.npz || bytes < kPlaceMin || d.placed.count(name) ||
        std::find(d.stages.begin(), d.stages.end(), name) == d.stages.end())
        return nullptr;
    AtomicFile file(d.dir + "/" + name + ".npy", d.mode == DumpMode::into ? false : d.replace);
    // Reserve the blocks now: a full disk is an error here, never a fault while storing
    // into the mapping. A file system without fallocate gets ordinary memory and write().
    const off_t size = off_t(kPage + bytes);
    if (::fallocate(file.fd(), 0, 0, size) != 0) {
        if (errno == EOPNOTSUPP || errno == ENOSYS) return nullptr;
        throw RuntimeFailure(file.target() + ": cannot write: " + std::strerror(errno));
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, file.fd(), off_t(kPage));
    if (p == MAP_FAILED) return nullptr;
    auto region = std::make_shared<MappedRegion>(p, bytes);
    d.placed.emplace(name, Impl::Placed{std::move(file), region});
    return region;
}

namespace {

// The headers and every stage not placed, written; the files still under temporary names.
void write_files(Dump::Impl& d, const std::vector<OutArray>& arrays, std::vector<AtomicFile>& files) {
    for (const auto& a : arrays) {
        auto it = d.placed.find(a.name);
        if (it == d.placed.end()) {
            files.emplace_back(d.dir + "/" + a.name + ".npy", false);
            write_npy(files.back(), a);
            files.back().close();
            continue;
        }
        AtomicFile& f = it->second.file;
        const Placement& region = *it->second.region;
        const std::size_t bytes = element_count(a.shape) * dtype_size(a.dtype);
        const std::string header = npy_header(a, kPage);
        if (bytes != region.bytes() || header.size() != kPage)
            throw RuntimeFailure(f.target() + ": internal error: stage " + a.name + " does not fit its file");
        // The stage normally lives in the mapping already; a stage computed elsewhere is
        // copied in.
        if (a.data != region.data()) std::memcpy(region.data(), a.data, bytes);
        if (::pwrite(f.fd(), header.data(), header.size(), 0) != ssize_t(header.size()))
            throw RuntimeFailure(f.target() + ": cannot write: " + std::strerror(errno));
        f.close();
        files.push_back(std::move(f));
    }
}

// The complete temporary directory becomes the dump, in one rename.
void move_into_place(Dump::Impl& d) {
    if (d.mode == DumpMode::fresh) {
        if (::renameat2(AT_FDCWD, d.dir.c_str(), AT_FDCWD, d.path.c_str(), RENAME_NOREPLACE) == 0) return;
        if (errno == EEXIST || errno == ENOTEMPTY)
            throw RuntimeFailure("{dump} " + d.path + ": was created by someone else while this run wrote it; kept");
        if (errno != EINVAL && errno != ENOSYS)
            throw RuntimeFailure("{dump} " + d.path + ": cannot move the dump into place: " + std::strerror(errno));
        if (describe_path(d.path) != "absent")  // no RENAME_NOREPLACE here: check, then rename
            throw RuntimeFailure("{dump} " + d.path + ": was created by someone else while this run wrote it; kept");
        if (::rename(d.dir.c_str(), d.path.c_str()) != 0)
            throw RuntimeFailure("{dump} " + d.path + ": cannot move the dump into place: " + std::strerror(errno));
        return;
    }
    // exchange: the new dump takes the old one's place at once; the old one, now at the
    // temporary name, is removed.
    if (::renameat2(AT_FDCWD, d.dir.c_str(), AT_FDCWD, d.path.c_str(), RENAME_EXCHANGE) != 0)
        throw RuntimeFailure("{dump} " + d.path + ": cannot replace the old dump: " + std::strerror(errno));
    remove_dump_dir(d.dir);
}

}  // namespace

void Dump::commit(const TraceView& v, const std::vector<OutArray>& extra) {
    Impl& d = *impl_;
    auto arrays = arrays_of(v, d.stages);
    arrays.insert(arrays.end(), extra.begin(), extra.end());
    if (d.npz) {
        AtomicFile f(d.path, d.replace);
        write_npz(f, arrays);
        f.commit();
        d.committed = true;
        return;
    }
    std::vector<AtomicFile> files;
    write_files(d, arrays, files);
    for (auto& f : files) {
        // The final name is listed before the file takes it, so a signal or a failure
        // before the whole dump is in place removes it again. In an existing directory
        // each name is claimed (never replaced): a name that is listed is this run's.
        const int slot = register_unfinished(f.target(), false);
        try {
            f.commit();
        } catch (...) {
            unregister_unfinished(slot);
            throw;
        }
        d.file_slots.push_back(slot);
        d.done.push_back(f.target());
    }
    if (d.mode != DumpMode::into) move_into_place(d);
    d.committed = true;
}

void write_dump(const std::string& path, const TraceView& v, const std::vector<std::string>& stages) {
    Dump dump(path, stages);
    dump.commit(v);
}

}  // namespace attnscope

// .npy / .npz dumps of the chosen stages, every file committed only once all are written.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

struct Dump::Impl {
    std::string path;
    std::vector<std::string> stages;
    bool npz = false, created = false, committed = false, replace = true;
    int slot = -1;  // the created directory's, in the unfinished outputs
    struct Placed {
        AtomicFile file;
        std::shared_ptr<Placement> region;
    };
    std::map<std::string, Placed> placed;
};

Dump::Dump(std::string path, std::vector<std::string> stages, bool replace) : impl_(std::make_unique<Impl>()) {
    impl_->replace = replace;
    Impl& d = *impl_;
    d.path = std::move(path);
    d.stages = std::move(stages);
    d.npz = dump_is_npz(d.path);
    if (d.npz) return;
    struct stat st {};
    if (::stat(d.path.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            throw UsageError("{dump} " + d.path +
                             ": exists and is not a directory (a dump is a directory or a .npz file)");
    } else if (d.slot = register_unfinished(d.path, true); ::mkdir(d.path.c_str(), 0777) == 0) {
        d.created = true;  // listed for the signal handlers before it existed
    } else {
        unregister_unfinished(d.slot);
        d.slot = -1;
        throw RuntimeFailure("{dump} " + d.path + ": cannot create directory: " + std::strerror(errno));
    }
    // Refuse before writing anything when a target cannot be replaced by a file, so a
    // failed dump never leaves old and new stages mixed.
    for (const auto& name : d.stages) {
        std::string target = d.path + "/" + name + ".npy";
        if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
            if (d.created) ::rmdir(d.path.c_str());
            d.created = false;
            unregister_unfinished(d.slot);
            throw RuntimeFailure("{dump} " + d.path + ": cannot write " + target +
                                 ": it exists and is not a regular file");
        }
    }
}

Dump::~Dump() {
    if (!impl_) return;
    impl_->placed.clear();  // removes the uncommitted temporaries
    if (impl_->created && !impl_->committed) ::rmdir(impl_->path.c_str());
    unregister_unfinished(impl_->slot);
}

std::shared_ptr<Placement> Dump::place(const std::string& name, std::size_t bytes) {
    Impl& d = *impl_;
    if (d.npz || bytes < kPlaceMin || d.placed.count(name) ||
        std::find(d.stages.begin(), d.stages.end(), name) == d.stages.end())
        return nullptr;
    AtomicFile file(d.path + "/" + name + ".npy", d.replace);
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

void Dump::commit(const TraceView& v) {
    Impl& d = *impl_;
    auto arrays = arrays_of(v, d.stages);
    if (d.npz) {
        AtomicFile f(d.path, d.replace);
        write_npz(f, arrays);
        f.commit();
        d.committed = true;
        return;
    }
    std::vector<AtomicFile> files;
    for (const auto& a : arrays) {
        auto it = d.placed.find(a.name);
        if (it == d.placed.end()) {
            files.emplace_back(d.path + "/" + a.name + ".npy", d.replace);
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
    for (auto& f : files) f.commit();
    d.committed = true;
}

void write_dump(const std::string& path, const TraceView& v, const std::vector<std::string>& stages) {
    Dump dump(path, stages);
    dump.commit(v);
}

}  // namespace attnscope

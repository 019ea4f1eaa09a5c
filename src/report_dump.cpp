// .npy / .npz dumps of the chosen stages, every file committed only once all are written.
#include "attnscope/errors.hpp"
#include "attnscope/report.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace attnscope {
namespace {

std::vector<OutArray> arrays_of(const TraceView& v, const std::vector<std::string>& stages) {
    std::vector<OutArray> out;
    for (const auto& name : stages) {
        const StageView& s = v.stage(name);
        out.push_back({s.name, s.shape, s.dtype, s.data});
    }
    return out;
}

}  // namespace

bool dump_is_npz(const std::string& path) {
    return path.size() > 4 && path.compare(path.size() - 4, 4, ".npz") == 0;
}

void write_dump(const std::string& path, const TraceView& v, const std::vector<std::string>& stages) {
    auto arrays = arrays_of(v, stages);
    if (dump_is_npz(path)) {
        AtomicFile f(path);
        write_npz(f, arrays);
        f.commit();
        return;
    }
    struct stat st {};
    bool created = false;
    if (::stat(path.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            throw UsageError("--dump " + path + ": exists and is not a directory (a dump is a directory or a .npz file)");
    } else if (::mkdir(path.c_str(), 0777) == 0) {
        created = true;
    } else {
        throw RuntimeFailure("--dump " + path + ": cannot create directory: " + std::strerror(errno));
    }
    // Refuse before writing anything when a target cannot be replaced by a file, so a
    // failed dump never leaves old and new stages mixed.
    for (const auto& a : arrays) {
        std::string target = path + "/" + a.name + ".npy";
        if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
            if (created) ::rmdir(path.c_str());
            throw RuntimeFailure("--dump " + path + ": cannot write " + target + ": it exists and is not a regular file");
        }
    }
    try {
        std::vector<AtomicFile> files;
        for (const auto& a : arrays) {
            files.emplace_back(path + "/" + a.name + ".npy");
            write_npy(files.back(), a);
            files.back().close();
        }
        for (auto& f : files) f.commit();
    } catch (...) {
        if (created) ::rmdir(path.c_str());  // the temporaries are gone: leave no empty directory
        throw;
    }
}

}  // namespace attnscope

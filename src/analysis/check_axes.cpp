// The check's axis orders: a stage's axes in {axes} letters, the order of each array of
// theirs (as {axes} says, or the only one its shape fits), and where its cells go.
#include <algorithm>
#include <cctype>

#include "attnscope/base/errors.hpp"
#include "check_internal.hpp"

namespace attnscope::check_detail {
namespace {

std::string sizes_text(const StageView& s, bool batched) {
    std::string out = batched ? "" : "B=1, ";
    for (std::size_t i = 0; i < s.axes.size(); ++i)
        out += (i ? ", " : "") + s.axes[i] + "=" + std::to_string(s.shape[i]);
    return out;
}

}  // namespace

Axes canonical_axes(const TraceView& ref, const StageView& s) {
    const bool over_keys = stage_info(s.id).over_keys();
    Axes axes;
    if (!ref.batched) axes.push_back({'b', 1});
    for (std::size_t i = 0; i < s.axes.size(); ++i) {
        const std::string& a = s.axes[i];
        char c = a.empty() ? '?' : char(std::tolower(static_cast<unsigned char>(a[0])));
        if (a == "B") c = 'b';
        if (a == "H" || a == "G") c = 'h';
        if (a == "Tq") c = over_keys ? 'q' : 't';
        if (a == "Tk") c = over_keys ? 'k' : 't';
        if (!a.empty() && a[0] == 'D') c = 'd';
        axes.push_back({c, s.shape[i]});
    }
    return axes;
}

std::optional<AxisReading> stage_layout(std::string_view order, const Axes& canon, std::string* why) {
    const bool one_position = std::any_of(canon.begin(), canon.end(), [](const Axis& a) { return a.letter == 't'; });
    const auto o = parse_axis_order(order, canon, one_position, why);
    return o ? layout_of(*o, canon, why) : std::nullopt;
}

std::vector<std::size_t> cell_map(const AxisReading& l, const Axes& canon) {
    std::vector<std::size_t> stride(canon.size());
    for (std::size_t i = canon.size(), s = 1; i-- > 0;) stride[i] = s, s *= canon[i].size;
    std::vector<std::size_t> size, step;  // their axes, expanded to ours
    for (const auto& grp : l.order.groups)
        for (char c : grp)
            for (std::size_t i = 0; i < canon.size(); ++i)
                if (canon[i].letter == c) size.push_back(canon[i].size), step.push_back(stride[i]);
    const std::size_t n = product(size);
    std::vector<std::size_t> map(n), idx(size.size(), 0);
    std::size_t off = 0;
    for (std::size_t k = 0; k < n; ++k) {
        map[k] = off;
        for (std::size_t a = size.size(); a-- > 0;) {  // odometer, last axis fastest
            if (++idx[a] < size[a]) {
                off += step[a];
                break;
            }
            off -= step[a] * (size[a] - 1);
            idx[a] = 0;
        }
    }
    return map;
}

// The axis order of one array of theirs: as --axes says, or the only one its shape fits.
AxisReading resolve_layout(const TraceView& ref, const StageView& s, const std::string& where, const std::string& name,
                           const Array& a, const std::optional<std::string>& order) {
    const auto canon = canonical_axes(ref, s);
    if (order) {
        std::string why;
        const auto l = stage_layout(*order, canon, &why);
        if (!l)
            throw InputError("{axes} " + name + "=" + *order + ": not an axis order of " + s.name + " (" + why + "; " +
                             s.name + " has " + sizes_text(s, ref.batched) + ")");
        if (l->shape != a.shape)
            throw InputError("{axes} " + name + "=" + *order + ": means the shape " + shape_str(l->shape) + ", but " +
                             where + " has the shape " + shape_str(a.shape));
        return *l;
    }
    std::vector<AxisReading> fits, all = stage_layouts(canon);
    for (const auto& l : all)
        if (l.shape == a.shape) fits.push_back(l);
    if (fits.size() == 1) return fits[0];
    std::vector<std::string> listed;
    for (const auto& l : (fits.empty() ? all : fits)) listed.push_back(l.name() + " " + shape_str(l.shape));
    if (fits.empty())
        throw InputError(where + ": the shape " + shape_str(a.shape) + " fits no axis order of " + s.name + " (" +
                         sizes_text(s, ref.batched) + "): expected " + join(listed, ", or ") +
                         " (tensors of another bundle, or other model options such as {heads}?)");
    throw InputError(where + ": the shape " + shape_str(a.shape) + " fits more than one axis order of " + s.name +
                     " (" + sizes_text(s, ref.batched) + "): " + join(listed, ", or ") + "; say which with {axes} " +
                     name + "=ORDER");
}

}  // namespace attnscope::check_detail

namespace attnscope {

using namespace check_detail;

std::vector<std::string> accepted_orders(const TraceView& ref, Stage stage) {
    std::vector<std::string> out;
    const StageView* s = ref.find(stage);
    if (!s) return out;
    for (const auto& l : stage_layouts(canonical_axes(ref, *s))) out.push_back(l.name() + " " + shape_str(l.shape));
    return out;
}

}  // namespace attnscope

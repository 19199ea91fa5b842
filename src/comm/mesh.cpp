#include "comm/mesh.h"

#include <algorithm>
#include <set>

#include "base/check.h"

namespace ndt {
namespace {

std::string list_str(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0)
      s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

int64_t product(const std::vector<int>& sizes) {
  int64_t p = 1;
  for (int s : sizes)
    p *= s;
  return p;
}

}  // namespace

std::vector<int> mesh_coords(int rank, const std::vector<int>& sizes) {
  NDT_ASSERT(
      rank >= 0 && rank < product(sizes),
      "rank ",
      rank,
      " outside mesh ",
      list_str(sizes));
  std::vector<int> coords(sizes.size());
  for (size_t i = sizes.size(); i-- > 0;) {
    coords[i] = rank % sizes[i];
    rank /= sizes[i];
  }
  return coords;
}

int mesh_rank(const std::vector<int>& coords, const std::vector<int>& sizes) {
  NDT_ASSERT(coords.size() == sizes.size(), "coords/sizes length mismatch");
  int rank = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    NDT_ASSERT(
        coords[i] >= 0 && coords[i] < sizes[i],
        "coord ",
        coords[i],
        " outside axis ",
        i,
        " of mesh ",
        list_str(sizes));
    rank = rank * sizes[i] + coords[i];
  }
  return rank;
}

std::vector<int> mesh_group_ranks(
    int rank, const std::vector<int>& sizes, const std::vector<int>& axes) {
  std::vector<int> coords = mesh_coords(rank, sizes);
  int n = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    NDT_ASSERT(
        axes[i] >= 0 && axes[i] < static_cast<int>(sizes.size()),
        "axis ",
        axes[i],
        " outside mesh ",
        list_str(sizes));
    NDT_ASSERT(
        std::count(axes.begin(), axes.end(), axes[i]) == 1,
        "axis ",
        axes[i],
        " repeated");
    n *= sizes[axes[i]];
  }
  std::vector<int> ranks(n);
  for (int g = 0; g < n; ++g) {
    // Group rank g, row-major over `axes` (last fastest).
    int rest = g;
    for (size_t i = axes.size(); i-- > 0;) {
      coords[axes[i]] = rest % sizes[axes[i]];
      rest /= sizes[axes[i]];
    }
    ranks[g] = mesh_rank(coords, sizes);
  }
  return ranks;
}

Mesh::Mesh(
    ProcessGroup& world, std::vector<int> sizes, std::vector<std::string> names)
    : world_(world), sizes_(std::move(sizes)), names_(std::move(names)) {
  NDT_CHECK(
      sizes_.size() == names_.size() && !sizes_.empty(),
      ConfigError,
      "mesh: ",
      names_.size(),
      " axis names for ",
      sizes_.size(),
      " sizes ",
      list_str(sizes_));
  std::set<std::string> seen;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    NDT_CHECK(
        !names_[i].empty() && names_[i].find(',') == std::string::npos,
        ConfigError,
        "mesh: axis ",
        i,
        " needs a non-empty name without ','");
    NDT_CHECK(
        seen.insert(names_[i]).second,
        ConfigError,
        "mesh: axis name '",
        names_[i],
        "' repeated");
    NDT_CHECK(
        sizes_[i] >= 1,
        ConfigError,
        "mesh: axis '",
        names_[i],
        "' has size ",
        sizes_[i],
        "; sizes must be >= 1");
  }
  NDT_CHECK(
      product(sizes_) == world_.size(),
      ConfigError,
      "mesh sizes ",
      list_str(sizes_),
      " (product ",
      product(sizes_),
      ") do not match the world size ",
      world_.size());
  rank_ = world_.rank();
  coords_ = mesh_coords(rank_, sizes_);
  for (int a = 0; a < static_cast<int>(sizes_.size()); ++a)
    make_group({a});
}

int Mesh::axis_index(std::string_view axis) const {
  auto it = std::find(names_.begin(), names_.end(), axis);
  if (it == names_.end()) {
    std::string known;
    for (const auto& n : names_) {
      if (!known.empty())
        known += ", ";
      known += n;
    }
    throw ConfigError(
        detail::str_cat("unknown mesh axis '", axis, "' (axes: ", known, ")"));
  }
  return static_cast<int>(it - names_.begin());
}

int Mesh::coord(std::string_view axis) const {
  return coords_[axis_index(axis)];
}

int Mesh::size(std::string_view axis) const {
  return sizes_[axis_index(axis)];
}

ProcessGroup& Mesh::group(std::string_view axis) {
  return group({axis});
}

ProcessGroup& Mesh::group(std::initializer_list<std::string_view> axes) {
  std::vector<int> idx;
  for (std::string_view a : axes)
    idx.push_back(axis_index(a));
  return make_group(idx);
}

ProcessGroup& Mesh::group(const std::vector<std::string>& axes) {
  std::vector<int> idx;
  for (const auto& a : axes)
    idx.push_back(axis_index(a));
  return make_group(idx);
}

std::vector<std::string> Mesh::group_names() const {
  std::vector<std::string> out;
  for (const auto& [name, g] : groups_)
    out.push_back(name);
  return out;
}

ProcessGroup& Mesh::named_group(std::string_view name) {
  std::vector<std::string> axes;
  size_t at = 0;
  for (size_t comma; (comma = name.find(',', at)) != std::string_view::npos;
       at = comma + 1)
    axes.emplace_back(name.substr(at, comma - at));
  axes.emplace_back(name.substr(at));
  return group(axes);
}

ProcessGroup& Mesh::make_group(const std::vector<int>& axes) {
  NDT_CHECK(!axes.empty(), ConfigError, "mesh: group of no axes");
  std::string name;
  for (int a : axes) {
    NDT_CHECK(
        std::count(axes.begin(), axes.end(), a) == 1,
        ConfigError,
        "mesh: axis '",
        names_[a],
        "' repeated in a group");
    if (!name.empty())
      name += ',';
    name += names_[a];
  }
  auto it = groups_.find(name);
  if (it != groups_.end())
    return *it->second;
  std::vector<int> members = mesh_group_ranks(rank_, sizes_, axes);
  // Color: the member with all group coords 0 (first of the list), which
  // every member computes alike; key: my position, i.e. my group rank.
  int key = static_cast<int>(
      std::find(members.begin(), members.end(), rank_) - members.begin());
  auto pg = world_.split(members.front(), key, name);
  NDT_ASSERT(
      pg->rank() == key && pg->size() == static_cast<int>(members.size()),
      "split of group ",
      name,
      " gave rank ",
      pg->rank(),
      "/",
      pg->size(),
      ", expected ",
      key,
      "/",
      members.size());
  return *groups_.emplace(name, std::move(pg)).first->second;
}

}  // namespace ndt

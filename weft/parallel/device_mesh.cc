#include "weft/parallel/device_mesh.h"

#include <set>

#include "weft/base/error.h"

namespace weft::parallel {

DeviceMesh::DeviceMesh(std::shared_ptr<dist::ProcessGroup> world,
                       std::vector<std::pair<std::string, int>> dims)
    : world_(std::move(world)), dims_(std::move(dims)) {
  std::set<std::string> names;
  long product = 1;
  std::string shape;
  for (const auto& [name, n] : dims_) {
    if (n < 1)
      throw InvalidArgument("DeviceMesh: dimension '" + name + "' has size " + std::to_string(n));
    if (!names.insert(name).second)
      throw InvalidArgument("DeviceMesh: dimension '" + name + "' appears twice");
    product *= n;
    shape += (shape.empty() ? "" : " x ") + name + "=" + std::to_string(n);
  }
  if (product != world_->size()) {
    throw InvalidArgument("DeviceMesh: " + shape + " is " + std::to_string(product) +
                          " ranks, but the job has " + std::to_string(world_->size()) +
                          "; make the product of the sizes equal the world size");
  }
  coordinates_ = coordinates_of(world_->rank());
  // The group along dimension d: the ranks whose other coordinates equal ours. Its color is
  // our rank with coordinate d set to 0; its order is the coordinate along d. A dimension that
  // spans the job is the world group itself, whose collectives run on the transport's direct
  // engine (shm) where split groups use the general algorithms.
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    if (dims_[d].second == world_->size()) {
      groups_.push_back(world_);
      continue;
    }
    int stride = 1;
    for (std::size_t e = d + 1; e < dims_.size(); ++e) stride *= dims_[e].second;
    const int color = world_->rank() - coordinates_[d] * stride;
    groups_.push_back(world_->split(color, coordinates_[d]));
  }
}

// Row-major: the last dimension varies fastest.
std::vector<int> DeviceMesh::coordinates_of(int rank) const {
  std::vector<int> coordinates(dims_.size());
  for (std::size_t d = dims_.size(); d-- > 0;) {
    coordinates[d] = rank % dims_[d].second;
    rank /= dims_[d].second;
  }
  return coordinates;
}

std::size_t DeviceMesh::index_of(const std::string& dim) const {
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    if (dims_[d].first == dim) return d;
  }
  std::string known;
  for (const auto& [name, n] : dims_) known += (known.empty() ? "" : ", ") + name;
  throw InvalidArgument("DeviceMesh: no dimension '" + dim + "' (the mesh has " + known + ")");
}

bool DeviceMesh::has(const std::string& dim) const {
  for (const auto& [name, n] : dims_) {
    if (name == dim) return true;
  }
  return false;
}

int DeviceMesh::size(const std::string& dim) const {
  if (const Flattened* f = flattened(dim)) return f->size;
  return dims_[index_of(dim)].second;
}
int DeviceMesh::coordinate(const std::string& dim) const { return coordinates_[index_of(dim)]; }
dist::ProcessGroup& DeviceMesh::group(const std::string& dim) const {
  if (const Flattened* f = flattened(dim)) return *f->group;
  return *groups_[index_of(dim)];
}

const DeviceMesh::Flattened* DeviceMesh::flattened(const std::string& name) const {
  for (const Flattened& f : flattened_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// As for one dimension: the color is our rank with the flattened coordinates set to 0, the
// order our row-major index over them.
void DeviceMesh::flatten(const std::vector<std::string>& dims, const std::string& name) {
  if (has(name) || flattened(name) != nullptr)
    throw InvalidArgument("DeviceMesh: the name '" + name + "' is taken");
  if (dims.size() < 2) throw InvalidArgument("DeviceMesh: flatten needs two dimensions or more");
  int color = world_->rank(), key = 0, size = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::size_t d = index_of(dims[i]);
    if (i > 0 && d <= index_of(dims[i - 1]))
      throw InvalidArgument("DeviceMesh: flatten's dimensions must be in mesh order");
    int stride = 1;
    for (std::size_t e = d + 1; e < dims_.size(); ++e) stride *= dims_[e].second;
    color -= coordinates_[d] * stride;
    key = key * dims_[d].second + coordinates_[d];
    size *= dims_[d].second;
  }
  auto group = size == world_->size() ? world_ : world_->split(color, key);
  flattened_.push_back({name, size, std::move(group)});
}

}  // namespace weft::parallel

// DeviceMesh: the ranks of a job arranged as an n-dimensional array with named dimensions
// ({"dp_replicate": 2, "dp_shard": 2}), the last dimension varying fastest; each dimension
// has the process group of the ranks that differ only in it (this rank's row along it).
// TorchTitan's device mesh, over weft::dist.
//
//   weft::parallel::DeviceMesh mesh(world, {{"dp_replicate", 2}, {"dp_shard", 2}});
//   mesh.group("dp_shard").all_reduce(grads);   // the 2 ranks sharing this rank's replica
//
// Several dimensions flatten into one group (TorchTitan's mesh["dp_shard", "cp"]._flatten()):
//   mesh.flatten({"dp_shard", "cp"}, "dp_shard_cp");   // collective; then group("dp_shard_cp")
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "weft/dist/process_group.h"

namespace weft::parallel {

class DeviceMesh {
 public:
  // Collective over `world`: every rank builds the same mesh. The sizes' product must equal
  // the world size, names must be distinct and sizes positive (InvalidArgument says which).
  DeviceMesh(std::shared_ptr<dist::ProcessGroup> world,
             std::vector<std::pair<std::string, int>> dims);

  const std::vector<std::pair<std::string, int>>& dims() const { return dims_; }
  bool has(const std::string& dim) const;
  int size(const std::string& dim) const;        // InvalidArgument for a dimension it does not have
  int coordinate(const std::string& dim) const;  // this rank's index along `dim`
  // World rank `rank`'s index along each dimension, in the mesh's order.
  std::vector<int> coordinates_of(int rank) const;
  dist::ProcessGroup& group(const std::string& dim) const;
  dist::ProcessGroup& world() const { return *world_; }

  // Collective: makes `name` the group of the ranks that differ only along `dims` (two or
  // more of the mesh's, in mesh order), ordered row-major over them. group(name) and size(name)
  // then answer for it; InvalidArgument for an unknown dimension or a name already taken.
  void flatten(const std::vector<std::string>& dims, const std::string& name);

 private:
  std::size_t index_of(const std::string& dim) const;
  struct Flattened {
    std::string name;
    int size;
    std::shared_ptr<dist::ProcessGroup> group;
  };
  const Flattened* flattened(const std::string& name) const;

  std::shared_ptr<dist::ProcessGroup> world_;
  std::vector<std::pair<std::string, int>> dims_;
  std::vector<int> coordinates_;
  std::vector<std::shared_ptr<dist::ProcessGroup>> groups_;
  std::vector<Flattened> flattened_;
};

}  // namespace weft::parallel

#include "weft/dist/backends/auto_backend.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "weft/dist/backend.h"
#include "weft/dist/backends/tcp_backend.h"
#include "weft/dist/engine/hierarchical_engine.h"
#include "weft/dist/internal/machine_id.h"
#include "weft/dist/launch_env.h"
#include "weft/dist/transport/shm/shm_transport.h"
#include "weft/dist/transport/tcp/tcp_transport.h"
#include "weft/store/prefix_store.h"

namespace weft::dist::internal {
namespace {

// Every rank publishes its machine id and reads all others'.
std::vector<std::string> host_ids(store::Store& store, int rank, int world_size, Seconds timeout) {
  store.set("auto/host/" + std::to_string(rank), machine_id());
  std::vector<std::string> ids;
  for (int r = 0; r < world_size; ++r) {
    const std::string key = "auto/host/" + std::to_string(r);
    store.wait({key}, timeout);
    ids.push_back(store.get(key));
  }
  return ids;
}

// The layout when every host holds the same number of ranks, numbered host by host, and
// there are several hosts with several ranks each; otherwise two levels gain nothing.
// `ids[r]`: the host of rank r (machine ids for the world, host numbers for a subgroup).
template <class HostId>
std::optional<HostLayout> regular_layout(const std::vector<HostId>& ids, int rank) {
  std::map<HostId, std::size_t> count;
  for (const HostId& id : ids) ++count[id];
  const std::size_t hosts = count.size();
  const std::size_t per_host = ids.size() / hosts;
  if (hosts < 2 || per_host < 2 || ids.size() % hosts != 0) return std::nullopt;
  for (const auto& [id, n] : count) {
    if (n != per_host) return std::nullopt;
  }
  // Equal counts and every block of per_host ranks on one host: each host is one block.
  for (std::size_t r = 0; r < ids.size(); ++r) {
    if (ids[r] != ids[r - r % per_host]) return std::nullopt;
  }
  const int n = static_cast<int>(per_host);
  return HostLayout{static_cast<int>(hosts), n, rank / n, rank % n};
}

// Sends and receives go over the network; an abort also stops this host's shared-memory ranks.
class TwoLevelTransport final : public Transport {
 public:
  TwoLevelTransport(std::shared_ptr<Transport> network, std::shared_ptr<ShmTransport> shm)
      : network_(std::move(network)), shm_(std::move(shm)) {}
  int rank() const override { return network_->rank(); }
  int size() const override { return network_->size(); }
  void send(int peer, Tag tag, std::span<const std::byte> bytes, Deadline deadline) override {
    network_->send(peer, tag, bytes, deadline);
  }
  void recv(int peer, Tag tag, std::span<std::byte> out, Deadline deadline) override {
    network_->recv(peer, tag, out, deadline);
  }
  int recv_any(Tag tag, std::span<std::byte> out, Deadline deadline) override {
    return network_->recv_any(tag, out, deadline);
  }
  void abort(const std::string& reason) override {
    network_->abort(reason);
    shm_->abort(reason);
  }

 private:
  std::shared_ptr<Transport> network_;
  std::shared_ptr<ShmTransport> shm_;
};

// Whether the network between hosts is mpi ($WEFT_AUTO_NETWORK, else mpi under Open MPI's
// mpirun when weft has it).
bool use_mpi(bool have_mpi) {
  const char* named = std::getenv("WEFT_AUTO_NETWORK");
  const std::string network = named != nullptr ? named : "";
  if (network.empty()) {
    const auto launched = launch_environment();
    return have_mpi && launched && launched->launcher == "mpirun";
  }
  if (network == "tcp") return false;
  if (network != "mpi") {
    throw InvalidArgument("dist: WEFT_AUTO_NETWORK='" + network +
                          "' is not a network between hosts; use tcp or mpi");
  }
  if (!have_mpi) {
    throw InvalidArgument(
        "dist: WEFT_AUTO_NETWORK=mpi but this weft was built without MPI; install "
        "libopenmpi-dev (scripts/install-deps) and rebuild, or use WEFT_AUTO_NETWORK=tcp");
  }
  return true;
}

// The mpi backend as the network, its errors saying how auto came to use it.
std::shared_ptr<Backend> mpi_between_hosts(NetworkFactory mpi_network,
                                           const BackendContext& context) {
  try {
    return mpi_network(context);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("dist: the auto backend runs mpi between hosts (under "
                                      "mpirun, or WEFT_AUTO_NETWORK=mpi; tcp: "
                                      "WEFT_AUTO_NETWORK=tcp): ") +
                          e.what());
  }
}

class AutoBackend final : public Backend {
 public:
  AutoBackend(std::shared_ptr<Backend> network, std::shared_ptr<ShmTransport> shm,
              HostLayout layout)
      : network_(std::move(network)),
        shm_(std::move(shm)),
        transport_(std::make_shared<TwoLevelTransport>(network_->transport(), shm_)),
        layout_(layout) {}

  std::string_view name() const override { return "auto"; }
  const std::shared_ptr<Transport>& transport() const override { return transport_; }
  std::size_t max_message_bytes() const override { return network_->max_message_bytes(); }

  // Two levels for the world group and for every subgroup whose members are laid out as the
  // world's ranks are (equal blocks, one per host, of two or more ranks, on two or more
  // hosts, in any order of hosts); a subgroup within one host runs on its shared memory alone
  // (every member sees that, so all take the same branch); any other runs flat over tcp.
  std::unique_ptr<CollectiveEngine> make_engine(const std::vector<int>& members, bool world,
                                                AgreeFn agree) override {
    if (!world && members.size() > 1 && on_this_host(members)) {
      std::vector<int> local;
      for (int member : members) local.push_back(shm_rank(member));
      return host_engine(local, agree, 0);
    }
    auto flat = network_->make_engine(members, world, agree);
    const std::optional<HostLayout> group = world ? layout_ : layout_of(members);
    if (!group) return flat;
    std::vector<int> local;  // this host's members, as ranks of the host's shm transport
    std::vector<int> cross;  // the members with this rank's local index, one per host
    for (std::size_t r = 0; r < members.size(); ++r) {
      const int group_rank = static_cast<int>(r);
      if (group_rank / group->per_host == group->host) local.push_back(shm_rank(members[r]));
      if (group_rank % group->per_host == group->local) cross.push_back(members[r]);
    }
    auto host_part = world ? shm_->world_collectives(std::make_unique<GenericEngine>(shm_, local))
                           : host_engine(local, agree, group->host * group->per_host);
    return std::make_unique<HierarchicalEngine>(
        *group, std::move(host_part), network_->make_engine(cross, false, agree), std::move(flat));
  }

 private:
  // The world's layout is regular: global rank g is on host g / per_host, rank g % per_host
  // of that host's shm transport.
  int host_of(int global) const { return global / layout_.per_host; }
  int shm_rank(int global) const { return global % layout_.per_host; }
  bool on_this_host(const std::vector<int>& members) const {
    return std::all_of(members.begin(), members.end(),
                       [this](int m) { return host_of(m) == layout_.host; });
  }

  // A subgroup's layout, from the hosts its members are on.
  std::optional<HostLayout> layout_of(const std::vector<int>& members) const {
    std::vector<int> hosts;
    int group_rank = -1;
    for (std::size_t r = 0; r < members.size(); ++r) {
      hosts.push_back(host_of(members[r]));
      if (members[r] == transport_->rank()) group_rank = static_cast<int>(r);
    }
    return regular_layout(hosts, group_rank);
  }

  // A subgroup's part on this host (`local`, whose first member is group rank `first`): the
  // shm step engine over pooled regions when every member here has one left, else the rings.
  // Every member of the group offers its region through `agree`, the one collective a group
  // in the making has, though only this host's are used.
  std::unique_ptr<CollectiveEngine> host_engine(const std::vector<int>& local, AgreeFn agree,
                                                int first) {
    const std::vector<std::int64_t> regions = agree(shm_->reserve_region());
    const auto begin = regions.begin() + first;
    const std::vector<std::int64_t> here(begin, begin + static_cast<std::ptrdiff_t>(local.size()));
    auto steps = shm_->collectives_for(local, here, std::make_unique<GenericEngine>(shm_, local));
    if (steps) return steps;
    return std::make_unique<GenericEngine>(shm_, local);
  }

  std::shared_ptr<Backend> network_;
  std::shared_ptr<ShmTransport> shm_;
  std::shared_ptr<Transport> transport_;
  HostLayout layout_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_auto_backend(const BackendContext& context,
                                                NetworkFactory mpi_network) {
  const bool mpi = use_mpi(mpi_network != nullptr);
  const auto layout = regular_layout(
      host_ids(*context.store, context.rank, context.world_size, context.timeout), context.rank);
  std::shared_ptr<Backend> network =
      mpi ? mpi_between_hosts(mpi_network, context)
          : std::make_shared<GenericBackend>("auto", make_tcp_transport(context),
                                             TcpTransport::kMaxMessage);
  if (!layout) return make_world_group(std::move(network), context);
  auto host_store = std::make_shared<store::PrefixStore>("auto/host" + std::to_string(layout->host),
                                                         context.store);
  auto shm =
      std::make_shared<ShmTransport>(layout->local, layout->per_host, host_store,
                                     ShmTransportOptions{.connect_timeout = context.timeout});
  return make_world_group(
      std::make_shared<AutoBackend>(std::move(network), std::move(shm), *layout), context);
}

}  // namespace weft::dist::internal

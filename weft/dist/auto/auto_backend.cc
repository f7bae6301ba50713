#include "weft/dist/auto/auto_backend.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "weft/dist/auto/hierarchical_engine.h"
#include "weft/dist/backend.h"
#include "weft/dist/internal/machine_id.h"
#include "weft/dist/launch_env.h"
#include "weft/dist/shm/shm_transport.h"
#include "weft/dist/tcp/tcp_backend.h"
#include "weft/dist/tcp/tcp_transport.h"
#include "weft/store/prefix_store.h"

namespace weft::dist::internal {
namespace {

// Every rank publishes its machine id with the network it chose between hosts, and reads all
// others'. Ranks that chose different networks (WEFT_AUTO_NETWORK exported to some ranks
// only) all fail here, before either network starts: MPI_Init has no deadline.
std::vector<std::string> host_ids(store::Store& store, const BackendContext& context,
                                  const std::string& network) {
  store.set("auto/host/" + std::to_string(context.rank), network + "|" + machine_id());
  std::vector<std::string> ids;
  for (int r = 0; r < context.world_size; ++r) {
    const std::string key = "auto/host/" + std::to_string(r);
    store.wait({key}, context.timeout);
    const std::string value = store.get(key);
    const std::size_t bar = value.find('|');
    const std::string theirs = value.substr(0, bar);
    if (bar == std::string::npos || theirs != network) {
      const std::string mine = std::to_string(context.rank);
      throw InvalidArgument("dist: the auto backend's ranks disagree on the network between " +
                            std::string("hosts: rank ") + std::to_string(r) + " chose '" + theirs +
                            "', rank " + mine + " '" + network +
                            "'; give every rank the same WEFT_AUTO_NETWORK (mpirun -x "
                            "WEFT_AUTO_NETWORK)");
    }
    ids.push_back(value.substr(bar + 1));
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
  void send(int peer, Tag tag, std::span<const std::byte> bytes,
            const Deadline& deadline) override {
    network_->send(peer, tag, bytes, deadline);
  }
  bool sends_at_once(int peer, std::size_t bytes) const override {
    return network_->sends_at_once(peer, bytes);
  }
  void recv(int peer, Tag tag, std::span<std::byte> out, const Deadline& deadline) override {
    network_->recv(peer, tag, out, deadline);
  }
  int recv_any(Tag tag, std::span<std::byte> out, const Deadline& deadline) override {
    return network_->recv_any(tag, out, deadline);
  }
  void send_recv(int to, Tag send_tag, std::span<const std::byte> bytes, int from, Tag recv_tag,
                 std::span<std::byte> out, const Deadline& deadline) override {
    network_->send_recv(to, send_tag, bytes, from, recv_tag, out, deadline);
  }
  void abort(const std::string& reason) override {
    network_->abort(reason);
    shm_->abort(reason);
  }

 private:
  std::shared_ptr<Transport> network_;
  std::shared_ptr<ShmTransport> shm_;
};

// The network between hosts: "mpi" or "tcp", and why (for errors).
struct Network {
  std::string name;
  std::string why;
};

// $WEFT_AUTO_NETWORK, else mpi when Open MPI's mpirun started the job and weft has MPI.
Network choose_network(bool have_mpi) {
  const char* named = std::getenv("WEFT_AUTO_NETWORK");
  const std::string network = named != nullptr ? named : "";
  const auto launched = launch_environment();
  if (network.empty()) {
    if (have_mpi && launched && launched->launcher == "mpirun") {
      return {"mpi", "the job was started by mpirun"};
    }
    return {"tcp", "the default"};
  }
  if (network != "tcp" && network != "mpi") {
    throw InvalidArgument("dist: WEFT_AUTO_NETWORK='" + network +
                          "' is not a network between hosts; use tcp or mpi");
  }
  if (network == "mpi" && !have_mpi) {
    throw InvalidArgument(
        "dist: WEFT_AUTO_NETWORK=mpi but this weft was built without MPI; install "
        "libopenmpi-dev (scripts/install-deps) and rebuild, or use WEFT_AUTO_NETWORK=tcp");
  }
  // Ranks started otherwise would each start an MPI of their own, a world of one.
  if (network == "mpi" && (!launched || launched->launcher == "torchrun")) {
    throw InvalidArgument(
        "dist: WEFT_AUTO_NETWORK=mpi but this job was not started by an MPI launcher (mpirun, "
        "or srun with an MPI built for Slurm), so its ranks cannot form an MPI job; start it "
        "with mpirun, or use WEFT_AUTO_NETWORK=tcp");
  }
  return {network, "WEFT_AUTO_NETWORK=" + network};
}

// The chosen network's backend; the mpi backend's errors say how auto came to use it.
std::shared_ptr<Backend> make_network(const Network& network, NetworkFactory mpi_network,
                                      const BackendContext& context) {
  if (network.name == "tcp") {
    return std::make_shared<GenericBackend>("tcp", make_tcp_transport(context),
                                            TcpTransport::kMaxMessage);
  }
  try {
    return mpi_network(context);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("dist: the auto backend runs mpi between hosts (" + network.why +
                          "; WEFT_AUTO_NETWORK=tcp for tcp): " + e.what());
  }
}

// A job auto runs flat on its network: that network's backend, under auto's name.
class FlatBackend final : public Backend {
 public:
  explicit FlatBackend(std::shared_ptr<Backend> network) : network_(std::move(network)) {}
  std::string_view name() const override { return "auto"; }
  const std::shared_ptr<Transport>& transport() const override { return network_->transport(); }
  std::size_t max_message_bytes() const override { return network_->max_message_bytes(); }
  std::unique_ptr<CollectiveEngine> make_engine(const std::vector<int>& members, bool world,
                                                AgreeFn agree) override {
    return network_->make_engine(members, world, agree);
  }

 private:
  std::shared_ptr<Backend> network_;
};

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
  // The shm level's messages carry at most what a tcp frame does (4 GiB), mpi's more.
  std::size_t max_message_bytes() const override {
    return std::min<std::size_t>(network_->max_message_bytes(), TcpTransport::kMaxMessage);
  }

  // Two levels for the world group and for every subgroup whose members are laid out as the
  // world's ranks are (equal blocks, one per host, of two or more ranks, on two or more
  // hosts, in any order of hosts); a subgroup within one host runs on its shared memory alone
  // (every member sees that, so all take the same branch); any other runs flat on the
  // network.
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

  // Destroyed last to first: transport_ lets go of the network's transport before network_
  // goes, whose mpi backend ends MPI once nothing of MPI is left.
  std::shared_ptr<Backend> network_;
  std::shared_ptr<ShmTransport> shm_;
  std::shared_ptr<Transport> transport_;
  HostLayout layout_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_auto_backend(const BackendContext& context,
                                                NetworkFactory mpi_network) {
  const Network network = choose_network(mpi_network != nullptr);
  const auto layout = regular_layout(host_ids(*context.store, context, network.name), context.rank);
  if (!layout) {
    return make_world_group(
        std::make_shared<FlatBackend>(make_network(network, mpi_network, context)), context);
  }
  // The host's shared memory first: it fails (within its timeout) on its own, before any
  // network, whose MPI could only end the job without saying why.
  auto host_store = std::make_shared<store::PrefixStore>("auto/host" + std::to_string(layout->host),
                                                         context.store);
  auto shm =
      std::make_shared<ShmTransport>(layout->local, layout->per_host, host_store,
                                     ShmTransportOptions{.connect_timeout = context.timeout});
  return make_world_group(std::make_shared<AutoBackend>(make_network(network, mpi_network, context),
                                                        std::move(shm), *layout),
                          context);
}

}  // namespace weft::dist::internal

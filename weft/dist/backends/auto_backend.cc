#include "weft/dist/backends/auto_backend.h"

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "weft/dist/backend.h"
#include "weft/dist/backends/tcp_backend.h"
#include "weft/dist/engine/hierarchical_engine.h"
#include "weft/dist/internal/machine_id.h"
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
std::optional<HostLayout> regular_layout(const std::vector<std::string>& ids, int rank) {
  std::map<std::string, std::size_t> count;
  for (const std::string& id : ids) ++count[id];
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

// Sends and receives go over tcp; an abort also stops this host's shared-memory ranks.
class TwoLevelTransport final : public Transport {
 public:
  TwoLevelTransport(std::shared_ptr<TcpTransport> tcp, std::shared_ptr<ShmTransport> shm)
      : tcp_(std::move(tcp)), shm_(std::move(shm)) {}
  int rank() const override { return tcp_->rank(); }
  int size() const override { return tcp_->size(); }
  void send(int peer, Tag tag, std::span<const std::byte> bytes, Deadline deadline) override {
    tcp_->send(peer, tag, bytes, deadline);
  }
  void recv(int peer, Tag tag, std::span<std::byte> out, Deadline deadline) override {
    tcp_->recv(peer, tag, out, deadline);
  }
  int recv_any(Tag tag, std::span<std::byte> out, Deadline deadline) override {
    return tcp_->recv_any(tag, out, deadline);
  }
  void abort(const std::string& reason) override {
    tcp_->abort(reason);
    shm_->abort(reason);
  }

 private:
  std::shared_ptr<TcpTransport> tcp_;
  std::shared_ptr<ShmTransport> shm_;
};

class AutoBackend final : public Backend {
 public:
  AutoBackend(std::shared_ptr<TcpTransport> tcp, std::shared_ptr<ShmTransport> shm,
              HostLayout layout)
      : tcp_(std::move(tcp)),
        shm_(std::move(shm)),
        transport_(std::make_shared<TwoLevelTransport>(tcp_, shm_)),
        layout_(layout) {}

  std::string_view name() const override { return "auto"; }
  const std::shared_ptr<Transport>& transport() const override { return transport_; }
  std::size_t max_message_bytes() const override { return TcpTransport::kMaxMessage; }

  // Two levels for the world group and for every subgroup whose members are laid out as the
  // world's ranks are (equal blocks, one per host, of two or more ranks, on two or more
  // hosts, in any order of hosts); flat over tcp otherwise.
  std::unique_ptr<CollectiveEngine> make_engine(const std::vector<int>& members, bool world,
                                                AgreeFn agree) override {
    auto flat = std::make_unique<GenericEngine>(tcp_, members);
    const std::optional<HostLayout> group = world ? layout_ : layout_of(members);
    if (!group) return flat;
    std::vector<int> local;  // this host's members, as ranks of the host's shm transport
    std::vector<int> cross;  // the members with this rank's local index, one per host
    for (std::size_t r = 0; r < members.size(); ++r) {
      const int rank = static_cast<int>(r);
      if (rank / group->per_host == group->host) local.push_back(members[r] % layout_.per_host);
      if (rank % group->per_host == group->local) cross.push_back(members[r]);
    }
    auto host_part = host_engine(local, world, agree, *group);
    return std::make_unique<HierarchicalEngine>(*group, std::move(host_part),
                                                std::make_unique<GenericEngine>(tcp_, cross),
                                                std::move(flat));
  }

 private:
  // A subgroup's layout, from the hosts its members are on (the world's is regular: global
  // rank g is on host g / per_host).
  std::optional<HostLayout> layout_of(const std::vector<int>& members) const {
    std::vector<std::string> hosts;
    int rank = -1;
    for (std::size_t r = 0; r < members.size(); ++r) {
      hosts.push_back(std::to_string(members[r] / layout_.per_host));
      if (members[r] == tcp_->rank()) rank = static_cast<int>(r);
    }
    return regular_layout(hosts, rank);
  }

  // The host's part of a group: the world's step engine; for a subgroup, a step engine over
  // pooled regions when every member on this host has one left (the whole group exchanges
  // its members' region indices, as the shm backend's subgroups do), else the rings.
  std::unique_ptr<CollectiveEngine> host_engine(const std::vector<int>& local, bool world,
                                                AgreeFn agree, const HostLayout& group) {
    auto rings = std::make_unique<GenericEngine>(shm_, local);
    if (world) return shm_->world_collectives(std::move(rings));
    const std::vector<std::int64_t> regions = agree(shm_->reserve_region());
    const auto first = regions.begin() + static_cast<std::ptrdiff_t>(group.host) * group.per_host;
    const std::vector<std::int64_t> here(first, first + group.per_host);
    auto steps = shm_->collectives_for(local, here, std::move(rings));
    if (steps) return steps;
    return std::make_unique<GenericEngine>(shm_, local);
  }

  std::shared_ptr<TcpTransport> tcp_;
  std::shared_ptr<ShmTransport> shm_;
  std::shared_ptr<Transport> transport_;
  HostLayout layout_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_auto_backend(const BackendContext& context) {
  const auto layout = regular_layout(
      host_ids(*context.store, context.rank, context.world_size, context.timeout), context.rank);
  auto tcp = make_tcp_transport(context);
  if (!layout) {
    return make_world_group(
        std::make_shared<GenericBackend>("auto", std::move(tcp), TcpTransport::kMaxMessage),
        context);
  }
  auto host_store = std::make_shared<store::PrefixStore>("auto/host" + std::to_string(layout->host),
                                                         context.store);
  auto shm =
      std::make_shared<ShmTransport>(layout->local, layout->per_host, host_store,
                                     ShmTransportOptions{.connect_timeout = context.timeout});
  return make_world_group(std::make_shared<AutoBackend>(std::move(tcp), std::move(shm), *layout),
                          context);
}

}  // namespace weft::dist::internal

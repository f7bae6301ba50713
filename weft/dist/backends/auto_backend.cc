#include "weft/dist/backends/auto_backend.h"

#include <map>
#include <numeric>
#include <optional>

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

  std::unique_ptr<CollectiveEngine> make_engine(const std::vector<int>& members, bool world,
                                                AgreeFn /*agree*/) override {
    auto flat = std::make_unique<GenericEngine>(tcp_, members);
    if (!world) return flat;
    std::vector<int> local(static_cast<std::size_t>(layout_.per_host));
    std::iota(local.begin(), local.end(), 0);
    std::vector<int> cross;
    for (int h = 0; h < layout_.hosts; ++h) cross.push_back(h * layout_.per_host + layout_.local);
    return std::make_unique<HierarchicalEngine>(
        layout_, shm_->world_collectives(std::make_unique<GenericEngine>(shm_, local)),
        std::make_unique<GenericEngine>(tcp_, cross), std::move(flat));
  }

 private:
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

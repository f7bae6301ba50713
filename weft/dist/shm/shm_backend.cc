#include "weft/dist/shm/shm_backend.h"

#include "weft/dist/backend.h"
#include "weft/dist/shm/shm_transport.h"

namespace weft::dist::internal {
namespace {

// Groups run the step engine over a region of every member's segment while regions last,
// and the generic engine over the rings after that.
class ShmBackend final : public Backend {
 public:
  explicit ShmBackend(std::shared_ptr<ShmTransport> transport)
      : shm_(transport), transport_(std::move(transport)) {}

  std::string_view name() const override { return "shm"; }
  const std::shared_ptr<Transport>& transport() const override { return transport_; }

  std::unique_ptr<CollectiveEngine> make_engine(const std::vector<int>& members, bool world,
                                                AgreeFn agree) override {
    auto rings = std::make_unique<GenericEngine>(transport_, members);
    if (members.size() == 1) return rings;
    if (world) return shm_->world_collectives(std::move(rings));
    // Members may have joined different numbers of groups before: they say which region each
    // offers, and the step engine runs only if every one has one.
    const auto regions = agree(shm_->reserve_region());
    auto steps = shm_->collectives_for(members, regions, std::move(rings));
    if (steps) return steps;
    return std::make_unique<GenericEngine>(transport_, members);
  }

 private:
  std::shared_ptr<ShmTransport> shm_;
  std::shared_ptr<Transport> transport_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_shm_backend(const BackendContext& context) {
  ShmTransportOptions options;
  options.connect_timeout = context.timeout;
  return make_world_group(std::make_shared<ShmBackend>(std::make_shared<ShmTransport>(
                              context.rank, context.world_size, context.store, options)),
                          context);
}

}  // namespace weft::dist::internal

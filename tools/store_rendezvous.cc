#include "store_rendezvous.h"

#include "weft/store/tcp_store.h"

namespace weft::tools {
namespace {

class StoreRendezvous final : public launch::RendezvousHost {
 public:
  explicit StoreRendezvous(store::TCPStoreOptions options) : store_(std::move(options)) {}
  int port() const override { return store_.port(); }

 private:
  store::TCPStore store_;
};

}  // namespace

std::unique_ptr<launch::RendezvousHost> start_store_rendezvous(const std::string& bind_host,
                                                               int port, const std::string& token) {
  store::TCPStoreOptions options;
  options.is_server = true;
  options.bind_host = bind_host;
  options.host = bind_host;
  options.port = port;
  options.token = token;
  return std::make_unique<StoreRendezvous>(std::move(options));
}

}  // namespace weft::tools

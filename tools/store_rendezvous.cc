#include "store_rendezvous.h"

#include "weft/store/death_log.h"
#include "weft/store/tcp_store.h"

namespace weft::tools {
namespace {

// A death is recorded while the others wait on it: a store that does not answer in this long
// is passed over (weftrun says so), and they wait out their own deadlines.
constexpr Seconds kRecordTimeout{5.0};

class StoreRendezvous final : public launch::RendezvousHost {
 public:
  explicit StoreRendezvous(store::TCPStoreOptions options) : store_(std::move(options)) {}
  int port() const override { return store_.port(); }
  void record_death(int attempt, int job_rank) override {
    store::record_death(store_, attempt, job_rank);
  }

 private:
  store::TCPStore store_;
};

class StoreClient final : public launch::DeathRecorder {
 public:
  explicit StoreClient(store::TCPStoreOptions options) : store_(std::move(options)) {}
  void record_death(int attempt, int job_rank) override {
    store::record_death(store_, attempt, job_rank);
  }

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

std::unique_ptr<launch::DeathRecorder> connect_store_recorder(const std::string& host, int port,
                                                              const std::string& token) {
  store::TCPStoreOptions options;
  options.host = host;
  options.port = port;
  options.token = token;
  options.timeout = kRecordTimeout;
  return std::make_unique<StoreClient>(std::move(options));
}

}  // namespace weft::tools

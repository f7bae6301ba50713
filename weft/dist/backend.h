// Backend: what one process of a job holds for a communication backend, shared by every
// process group it creates: the Transport (point-to-point messages) and the knowledge of
// how to run a group's collectives, handed to each new group as its CollectiveEngine.
// Backends are made by the factories registered here (register_backend) and chosen by
// init_process_group (weft/dist/init.h, the user's header); this header is for writing one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weft/base/deadline.h"
#include "weft/base/function_ref.h"
#include "weft/dist/engine/collective_engine.h"
#include "weft/dist/engine/generic_engine.h"
#include "weft/dist/transport/transport.h"
#include "weft/store/store.h"

namespace weft::dist {

// An all-gather of one integer per rank over a group being created, for engines whose ranks
// must agree on something (which shared region to use) before they can run.
using AgreeFn = FunctionRef<std::vector<std::int64_t>(std::int64_t mine)>;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;  // "shm", "tcp", "thread", ...
  virtual const std::shared_ptr<Transport>& transport() const = 0;
  // The engine of a new group of `members` (global ranks, in group order; this rank is one);
  // `world`: the job's world group, made once, before any other. Called on every member, in
  // the same order of group creations everywhere, so it may call `agree` (collective over
  // the members) to settle what the engine needs.
  virtual std::unique_ptr<CollectiveEngine> make_engine(const std::vector<int>& members, bool world,
                                                        AgreeFn agree) = 0;
  // The largest buffer one operation may carry, in bytes (ProcessGroup rejects larger ones
  // before anything is sent).
  virtual std::size_t max_message_bytes() const { return std::numeric_limits<std::size_t>::max(); }

  // The thresholds every group's engine gets (weft/dist/engine/tuning.h): the defaults, or
  // the table the world group's ranks agreed on when it was made.
  const CollectiveTuning& tuning() const { return tuning_; }
  void set_tuning(const CollectiveTuning& tuning) { tuning_ = tuning; }

 private:
  CollectiveTuning tuning_;
};

// A backend whose groups all run the generic engine over its transport: thread and tcp.
class GenericBackend final : public Backend {
 public:
  GenericBackend(std::string name, std::shared_ptr<Transport> transport,
                 std::size_t max_message_bytes = std::numeric_limits<std::size_t>::max(),
                 std::shared_ptr<ArrivalBoard> board = nullptr)
      : name_(std::move(name)),
        transport_(std::move(transport)),
        max_message_bytes_(max_message_bytes),
        board_(std::move(board)) {}

  std::string_view name() const override { return name_; }
  const std::shared_ptr<Transport>& transport() const override { return transport_; }
  std::unique_ptr<CollectiveEngine> make_engine(const std::vector<int>& members, bool /*world*/,
                                                AgreeFn /*agree*/) override {
    return std::make_unique<GenericEngine>(transport_, members, board_);
  }
  std::size_t max_message_bytes() const override { return max_message_bytes_; }

 private:
  std::string name_;
  std::shared_ptr<Transport> transport_;
  std::size_t max_message_bytes_;
  std::shared_ptr<ArrivalBoard> board_;
};

class ProcessGroup;

// What a backend gets to build the world group from.
struct BackendContext {
  int rank = 0;        // -1 for a backend that places ranks itself, when nothing said where
  int world_size = 1;  // likewise
  std::shared_ptr<store::Store> store;  // the job's store, private to this attempt (null for
                                        // a backend that rendezvouses by itself)
  std::string token;                    // the job token (may be empty when run by hand)
  std::string host;                     // the address peers reach this rank at
  Seconds timeout{300};
};

using BackendFactory = std::function<std::shared_ptr<ProcessGroup>(const BackendContext&)>;

// For backends: the world group (every rank of the backend's transport, in rank order), once
// the backend has connected its transport.
std::shared_ptr<ProcessGroup> make_world_group(std::shared_ptr<Backend> backend,
                                               const BackendContext& context);

struct BackendTraits {
  // False for a backend whose processes find each other by themselves (mpi: MPI's launcher
  // places them): init_process_group then opens no store and lets the backend set the rank
  // and world size the caller or the environment left open.
  bool uses_store = true;
};

// Makes `name` available to init_process_group. The built-in backends (shm, tcp, auto, and
// mpi when built with it) are registered in weft/dist/internal/registry.cc. Thread-safe.
void register_backend(const std::string& name, BackendFactory factory, BackendTraits traits = {});

}  // namespace weft::dist

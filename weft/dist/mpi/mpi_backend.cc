#include "weft/dist/mpi/mpi_backend.h"

#include <mpi.h>

#include "weft/dist/backend.h"
#include "weft/dist/mpi/mpi_check.h"
#include "weft/dist/mpi/mpi_engine.h"
#include "weft/dist/mpi/mpi_transport.h"
#include "weft/dist/mpi/mpi_watchdog.h"

namespace weft::dist::internal {
namespace {

constexpr int kCreateGroupTag = 7;

class MpiBackend final : public Backend {
 public:
  // timeout: how long creating a group's communicator may take (the job's init timeout).
  MpiBackend(bool finalize, Seconds timeout)
      : mpi_(std::make_shared<MpiTransport>(MPI_COMM_WORLD)),
        transport_(mpi_),
        watchdog_(std::make_shared<MpiWatchdog>()),
        finalize_(finalize),
        timeout_(timeout) {}

  // MPI can start once per process: a backend that started it ends it, unless the job
  // aborted (peers that will never finalize would keep MPI_Finalize waiting).
  ~MpiBackend() override {
    const bool healthy = !mpi_->aborted();
    transport_.reset();
    mpi_.reset();
    watchdog_.reset();
    if (finalize_ && healthy) MPI_Finalize();
  }

  std::string_view name() const override { return "mpi"; }
  const std::shared_ptr<Transport>& transport() const override { return transport_; }

  std::unique_ptr<CollectiveEngine> make_engine(const std::vector<int>& members, bool world,
                                                AgreeFn agree) override {
    MPI_Comm comm = MPI_COMM_NULL;
    // Collective MPI calls without a timeout of their own: the watchdog bounds them.
    const Deadline deadline = Deadline::after(timeout_);
    if (world) {
      const MpiWatchdog::Guard guard(*watchdog_, deadline, "MPI_Comm_dup");
      check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
    } else {
      // First make sure every member is here (the agreement fails with the group's timeout,
      // as a TimeoutError instead of the watchdog's end of the job).
      agree(0);
      MPI_Group world_group = MPI_GROUP_NULL;
      MPI_Group group = MPI_GROUP_NULL;
      MPI_Comm_group(MPI_COMM_WORLD, &world_group);
      MPI_Group_incl(world_group, static_cast<int>(members.size()), members.data(), &group);
      int created;
      {
        const MpiWatchdog::Guard guard(*watchdog_, deadline, "MPI_Comm_create_group");
        created = MPI_Comm_create_group(MPI_COMM_WORLD, group, kCreateGroupTag, &comm);
      }
      MPI_Group_free(&group);
      MPI_Group_free(&world_group);
      check_mpi(created, "MPI_Comm_create_group");
    }
    return std::make_unique<MpiEngine>(comm, watchdog_);
  }

 private:
  std::shared_ptr<MpiTransport> mpi_;
  std::shared_ptr<Transport> transport_;
  std::shared_ptr<MpiWatchdog> watchdog_;  // shared with every engine
  bool finalize_;
  Seconds timeout_;
};

// Starts MPI with every thread allowed to call it (ProcessGroup runs operations on its
// queue thread and on callers' threads), or checks that whoever started it did so.
bool start_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    throw InvalidArgument(
        "dist::init_process_group: MPI was already finalized in this process, and MPI starts "
        "only once per process; keep the first mpi process group alive instead");
  }
  int started = 0;
  MPI_Initialized(&started);
  int provided = 0;
  if (started) {
    MPI_Query_thread(&provided);
  } else {
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    throw InvalidArgument(
        "dist: the mpi backend needs MPI_THREAD_MULTIPLE and this MPI provides level " +
        std::to_string(provided) + "; initialise MPI with MPI_Init_thread(..., " +
        "MPI_THREAD_MULTIPLE, ...) or use an MPI built with thread support");
  }
  return !started;
}

// The rank and world size MPI placed this process at, checked against the context's.
BackendContext placed_by_mpi(const BackendContext& context) {
  BackendContext placed = context;
  MPI_Comm_rank(MPI_COMM_WORLD, &placed.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &placed.world_size);
  const bool rank_differs = context.rank >= 0 && context.rank != placed.rank;
  if (rank_differs || (context.world_size >= 0 && context.world_size != placed.world_size)) {
    throw InvalidArgument("dist: the mpi backend was asked for rank " +
                          std::to_string(context.rank) + " of " +
                          std::to_string(context.world_size) + " but MPI placed this process at " +
                          std::to_string(placed.rank) + " of " + std::to_string(placed.world_size) +
                          "; let the backend take both from MPI (mpirun -np N, or srun)");
  }
  return placed;
}

struct Started {
  std::shared_ptr<Backend> backend;
  BackendContext placed;  // the context with MPI's rank and world size
};

Started start_backend(const BackendContext& context) {
  const bool started_here = start_mpi();
  BackendContext placed = placed_by_mpi(context);
  MpiEngine::create_16bit_types();
  return {std::make_shared<MpiBackend>(started_here, context.timeout), std::move(placed)};
}

}  // namespace

std::shared_ptr<Backend> make_mpi_network(const BackendContext& context) {
  return start_backend(context).backend;
}

std::shared_ptr<ProcessGroup> make_mpi_backend(const BackendContext& context) {
  Started started = start_backend(context);
  return make_world_group(std::move(started.backend), started.placed);
}

}  // namespace weft::dist::internal

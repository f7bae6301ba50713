// init_process_group: its one-line errors, and each init method with ranks as processes.
#include "weft/dist/init.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>

#include "tests/support/forked_ranks.h"
#include "tests/support/temp_dir.h"
#include "weft/dist.h"
#include "weft/dist/auto/auto_backend.h"
#include "weft/net/socket.h"
#include "weft/store/file_store.h"
#include "weft/store/prefix_store.h"
#include "weft/store/tcp_store.h"

namespace weft::dist {
namespace {

using testing::HasSubstr;

std::string init_error(InitOptions options) {
  try {
    init_process_group(std::move(options));
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

class InitErrorTest : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "WEFT_BACKEND",
                          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                          "SLURM_PROCID", "SLURM_NTASKS", "WEFT_AUTO_NETWORK"}) {
      ::unsetenv(v);
    }
  }
};

TEST_F(InitErrorTest, MissingVariablesSayWhatToSet) {
  EXPECT_THAT(init_error({}),
              HasSubstr("RANK is not set; run under weftrun, mpirun or srun, or set RANK"));
  ::setenv("RANK", "0", 1);
  EXPECT_THAT(init_error({}), HasSubstr("WORLD_SIZE is not set but RANK is"));
  ::setenv("WORLD_SIZE", "2", 1);
  EXPECT_THAT(init_error({}), HasSubstr("MASTER_ADDR is not set"));
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  EXPECT_THAT(init_error({}), HasSubstr("MASTER_PORT is not set"));
}

TEST_F(InitErrorTest, BadValuesAndUnknownNamesAreRejected) {
  EXPECT_THAT(init_error({.backend = "nccl", .rank = 0, .world_size = 1}),
              HasSubstr("unknown backend 'nccl'; registered backends: "));
  EXPECT_THAT(init_error({.backend = "thread", .rank = 0, .world_size = 1}),
              HasSubstr("run_threads"));
  EXPECT_THAT(init_error({.init_method = "udp://x", .rank = 0, .world_size = 1}),
              HasSubstr("unknown init_method 'udp://x'"));
  EXPECT_THAT(init_error({.rank = 3, .world_size = 2}),
              HasSubstr("rank 3 is not in [0, world size 2)"));
  ::setenv("RANK", "two", 1);
  EXPECT_THAT(init_error({.world_size = 2}), HasSubstr("RANK='two' is not a non-negative integer"));
  ::unsetenv("RANK");
  const weft::test::TempDir dir("weft-init");
  ::setenv("WEFT_AUTO_NETWORK", "udp", 1);
  EXPECT_THAT(init_error({.backend = "auto",
                          .init_method = "file://" + dir.file("store"),
                          .rank = 0,
                          .world_size = 1}),
              HasSubstr("WEFT_AUTO_NETWORK='udp' is not a network between hosts; use tcp or mpi"));
  ::unsetenv("WEFT_AUTO_NETWORK");
}

// The mpi network asked for where weft was built without MPI (registry.cc then gives auto no
// mpi factory): refused with what to do, before any rendezvous.
TEST_F(InitErrorTest, AutoOverMpiWithoutMpiSaysHowToGetIt) {
  ::setenv("WEFT_AUTO_NETWORK", "mpi", 1);
  try {
    internal::make_auto_backend(BackendContext{.rank = 0, .world_size = 1}, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("built without MPI; install libopenmpi-dev"));
  }
  ::unsetenv("WEFT_AUTO_NETWORK");
}

// Closed by default: a tcp job listens on loopback unless told where (the address it
// publishes says where it listens), and one told to listen beyond this host needs a token.
TEST_F(InitErrorTest, ListensOnLoopbackUnlessToldAndThenOnlyWithAToken) {
  for (const char* v : {"WEFT_HOST", "WEFT_SOCKET_IFNAME", "WEFT_JOB_TOKEN"}) ::unsetenv(v);
  const weft::test::TempDir dir("weft-init");
  {
    auto world = init_process_group({.backend = "tcp",
                                     .init_method = "file://" + dir.file("store"),
                                     .rank = 0,
                                     .world_size = 1});
    store::PrefixStore attempt("attempt0", std::make_shared<store::FileStore>(dir.file("store")));
    EXPECT_THAT(attempt.get("tcp/addr/0"), testing::StartsWith("127.0.0.1:"));
  }
  ::setenv("WEFT_HOST", "192.0.2.1", 1);
  EXPECT_THAT(init_error({.backend = "tcp",
                          .init_method = "file://" + dir.file("store2"),
                          .rank = 0,
                          .world_size = 1}),
              HasSubstr("listens on 192.0.2.1, beyond this host, without a job token; set "
                        "WEFT_JOB_TOKEN"));
  ::unsetenv("WEFT_HOST");
}

TEST(InitTest, FileInitMethod) {
  const weft::test::TempDir dir("weft-init");
  const std::string method = "file://" + dir.file("store");
  const auto exits = weft::test::run_forked_ranks(3, [&](int rank) {
    auto pg = init_process_group(
        {.backend = "tcp", .init_method = method, .rank = rank, .world_size = 3});
    std::vector<int> v{rank};
    pg->all_reduce(v);
    return v[0] == 3 ? 0 : 1;
  });
  for (const auto& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.code;
}

// A store of the caller's own, as torch's init_process_group(store=...), with each backend
// the ranks can pick on one host.
TEST(InitTest, GivenStore) {
  for (const std::string backend : {"tcp", ""}) {
    const int port = net::Listener::bind("127.0.0.1", 0).port();
    const auto exits = weft::test::run_forked_ranks(3, [&](int rank) {
      ::unsetenv("WEFT_BACKEND");
      auto store = std::make_shared<store::TCPStore>(
          store::TCPStoreOptions{.port = port, .is_server = rank == 0});
      auto pg = init_process_group({.backend = backend,
                                    .rank = rank,
                                    .world_size = 3,
                                    .timeout = Seconds(60),
                                    .store = store});
      std::vector<int> v{rank};
      pg->all_reduce(v);
      const std::string expected = backend.empty() ? "shm" : backend;
      return v[0] == 3 && pg->backend_name() == expected ? 0 : 1;
    });
    for (const auto& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << backend << " " << e.code;
  }
}

// In-place recovery's rendezvous: the ranks that stay name the next round, a replacement
// finds it (the first its rank has not joined), and the new world works; a rank joins a round
// once.
TEST(InitTest, LaterRoundsFormTheWorldAgain) {
  const int port = net::Listener::bind("127.0.0.1", 0).port();
  const auto exits = weft::test::run_forked_ranks(2, [&](int rank) {
    ::unsetenv("WEFT_BACKEND");
    auto store = std::make_shared<store::TCPStore>(
        store::TCPStoreOptions{.port = port, .is_server = rank == 0});
    const InitOptions first{.rank = rank, .world_size = 2, .timeout = Seconds(60), .store = store};
    const JoinedWorld old = join_process_group(first);
    InitOptions next = first;
    next.round = rank == 0 ? 1 : InitOptions::kFirstFreeRound;  // rank 1 as its replacement
    const JoinedWorld again = join_process_group(next);
    std::vector<int> v{rank + 1};
    again.world->all_reduce(v);
    next.round = 1;
    try {
      (void)join_process_group(next);
      return 3;
    } catch (const InvalidArgument& e) {
      if (std::string(e.what()).find("has joined round 1 already") == std::string::npos) return 4;
    }
    return old.round == 0 && again.round == 1 && v[0] == 3 ? 0 : 1;
  });
  for (const auto& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.code;
}

// With no backend named, ranks that find themselves on one host choose shm.
TEST(InitTest, TcpInitMethodWithRankZeroHostingTheStoreDefaultsToShm) {
  // A free port of our own (the harness's store sits on MASTER_PORT): bound, then released.
  const int port = net::Listener::bind("127.0.0.1", 0).port();
  const std::string method = "tcp://127.0.0.1:" + std::to_string(port);
  // Four ranks: rank 0 is done with the store long before rank 3, which must still reach it.
  const auto exits = weft::test::run_forked_ranks(4, [&](int rank) {
    ::unsetenv("WEFT_STORE_HOSTED");  // run by hand: rank 0 hosts the store itself
    ::unsetenv("WEFT_JOB_TOKEN");
    ::unsetenv("WEFT_BACKEND");
    auto pg = init_process_group({.init_method = method, .rank = rank, .world_size = 4});
    if (pg->backend_name() != "shm") return 2;
    std::vector<int> v{rank + 1};
    pg->all_reduce(v);
    return v[0] == 10 ? 0 : 1;
  });
  for (const auto& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.code;
}

// auto's ranks must agree on the network between hosts: rank 0 told tcp, rank 1 placed by
// mpirun's variables and so on mpi. Both fail at once, before MPI starts, saying why.
TEST(InitTest, AutoRanksOnDifferentNetworksFailTogether) {
  const auto backends = registered_backends();
  if (std::find(backends.begin(), backends.end(), "mpi") == backends.end()) {
    GTEST_SKIP() << "built without the mpi backend (WEFT_WITH_MPI)";
  }
  const weft::test::TempDir dir("weft-init");
  const std::string method = "file://" + dir.file("store");
  const auto exits = weft::test::run_forked_ranks(2, [&](int rank) {
    for (const char* v : {"RANK", "WORLD_SIZE", "WEFT_BACKEND", "WEFT_AUTO_NETWORK"}) {
      ::unsetenv(v);
    }
    if (rank == 0) ::setenv("WEFT_AUTO_NETWORK", "tcp", 1);
    if (rank == 1) {
      ::setenv("OMPI_COMM_WORLD_RANK", "1", 1);
      ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    }
    const std::string error = init_error({.backend = "auto",
                                          .init_method = method,
                                          .rank = rank,
                                          .world_size = 2,
                                          .timeout = Seconds(20)});
    return error.find("disagree on the network between hosts: rank ") != std::string::npos ? 0 : 1;
  });
  for (const auto& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.code;
}

// Started by mpirun, an MPI launcher speaking PMI, or srun instead of weftrun: each
// launcher's own variables place the rank, and the store is found on this host.
TEST(InitTest, ClusterLaunchersVariablesFormTheJob) {
  const std::vector<std::vector<std::string>> launchers = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"},
      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE"}};
  for (const auto& names : launchers) {
    const int port = net::Listener::bind("127.0.0.1", 0).port();
    const auto exits = weft::test::run_forked_ranks(2, [&](int rank) {
      for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                            "WEFT_STORE_HOSTED", "WEFT_JOB_TOKEN", "WEFT_BACKEND"}) {
        ::unsetenv(v);
      }
      ::setenv(names[0].c_str(), std::to_string(rank).c_str(), 1);
      ::setenv(names[1].c_str(), "2", 1);
      ::setenv(names[2].c_str(), "2", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      auto pg = init_process_group({.timeout = Seconds(60)});
      std::vector<int> v{rank + 1};
      pg->all_reduce(v);
      return pg->rank() == rank && pg->size() == 2 && v[0] == 3 ? 0 : 1;
    });
    for (const auto& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << names[0] << " " << e.code;
  }
}

TEST(InitTest, OversizedBufferIsRejectedBeforeAnythingIsSent) {
  const auto exits = weft::test::run_forked_ranks(1, [](int) {
    auto pg = init_process_group({.backend = "tcp"});
    float dummy = 0;
    // 8 GiB claimed, nothing allocated: the check must come before any byte is touched.
    Buffer huge(&dummy, std::size_t{1} << 31, DType::kFloat32);
    try {
      pg->broadcast(huge, 0);
    } catch (const InvalidArgument& e) {
      std::vector<int> v{1};
      pg->all_reduce(v);  // the group is still usable
      return std::string(e.what()).find("message limit") != std::string::npos ? 0 : 3;
    }
    return 2;
  });
  EXPECT_TRUE(exits[0].exited && exits[0].code == 0) << exits[0].code;
}

}  // namespace
}  // namespace weft::dist

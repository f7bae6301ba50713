// The launcher variables each cluster launcher sets, read through a fake environment.
#include "weft/dist/launch_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "weft/dist/errors.h"

namespace weft::dist {
namespace {

using testing::HasSubstr;

std::optional<LaunchEnvironment> read(const std::map<std::string, std::string>& vars) {
  return read_launch_environment([&](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    read(vars);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TEST(LaunchEnvTest, NothingSetIsNoLauncher) { EXPECT_FALSE(read({}).has_value()); }

TEST(LaunchEnvTest, TorchrunNamesNeedTheirMaster) {
  const auto env = read({{"RANK", "3"},
                         {"WORLD_SIZE", "8"},
                         {"LOCAL_RANK", "1"},
                         {"LOCAL_WORLD_SIZE", "2"},
                         {"MASTER_ADDR", "10.0.0.1"},
                         {"MASTER_PORT", "29400"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->launcher, "torchrun");
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "10.0.0.1");
  EXPECT_EQ(env->master_port, 29400);
  const auto bare = read({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_FALSE(bare->master_addr.has_value());  // torch requires them too
  EXPECT_FALSE(bare->master_port.has_value());
}

TEST(LaunchEnvTest, OpenMpiOnOneHostMeetsOnLoopback) {
  const auto env = read({{"OMPI_COMM_WORLD_RANK", "2"},
                         {"OMPI_COMM_WORLD_SIZE", "4"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                         {"PMIX_NAMESPACE", "prterun-host-1234@1"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->launcher, "mpirun");
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->local_rank, 2);
  EXPECT_EQ(env->master_addr, "127.0.0.1");
  // Derived from the job id: the same for every rank of the job, in weft's range.
  const auto other_rank = read({{"OMPI_COMM_WORLD_RANK", "0"},
                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                {"PMIX_NAMESPACE", "prterun-host-1234@1"}});
  EXPECT_EQ(env->master_port, other_rank->master_port);
  EXPECT_GE(*env->master_port, 29500);
  EXPECT_LT(*env->master_port, 31500);
}

TEST(LaunchEnvTest, OpenMpiAcrossHostsNeedsMasterAddr) {
  const auto env = read({{"OMPI_COMM_WORLD_RANK", "5"},
                         {"OMPI_COMM_WORLD_SIZE", "8"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  EXPECT_FALSE(env->master_addr.has_value());
  EXPECT_EQ(env->master_port, 29500);  // no job id: the default
  const auto told = read({{"OMPI_COMM_WORLD_RANK", "5"},
                          {"OMPI_COMM_WORLD_SIZE", "8"},
                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                          {"MASTER_ADDR", "node1"}});
  EXPECT_EQ(told->master_addr, "node1");
}

TEST(LaunchEnvTest, PmiLaunchers) {
  const auto env = read(
      {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->launcher, "pmi");
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->master_addr, "127.0.0.1");
}

TEST(LaunchEnvTest, SlurmFindsTheMasterOnItsNodeList) {
  const auto env = read({{"SLURM_PROCID", "6"},
                         {"SLURM_NTASKS", "8"},
                         {"SLURM_LOCALID", "2"},
                         {"SLURM_JOB_NUM_NODES", "2"},
                         {"SLURM_JOB_NODELIST", "gpu[07-08]"},
                         {"SLURM_JOB_ID", "4242"},
                         {"SLURM_TASKS_PER_NODE", "4(x2)"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->launcher, "slurm");
  EXPECT_EQ(env->rank, 6);
  EXPECT_EQ(env->local_rank, 2);
  EXPECT_EQ(env->local_world_size, 4);  // 8 tasks over 2 nodes
  EXPECT_EQ(env->master_addr, "gpu07");
  EXPECT_GE(*env->master_port, 29500);
  const auto one_node = read({{"SLURM_PROCID", "0"},
                              {"SLURM_NTASKS", "2"},
                              {"SLURM_JOB_NUM_NODES", "1"},
                              {"SLURM_JOB_NODELIST", "gpu07"}});
  EXPECT_EQ(one_node->master_addr, "127.0.0.1");
}

TEST(LaunchEnvTest, FirstLauncherWins) {
  // weftrun inside a Slurm allocation: its RANK, not the allocation's SLURM_PROCID.
  const auto env = read({{"RANK", "1"},
                         {"WORLD_SIZE", "2"},
                         {"SLURM_PROCID", "0"},
                         {"SLURM_NTASKS", "1"},
                         {"MASTER_ADDR", "127.0.0.1"}});
  EXPECT_EQ(env->launcher, "torchrun");
  EXPECT_EQ(env->rank, 1);
}

TEST(LaunchEnvTest, MalformedValuesNameTheVariable) {
  EXPECT_THAT(error_of({{"PMI_RANK", "x"}, {"PMI_SIZE", "2"}}),
              HasSubstr("PMI_RANK='x' is not a non-negative integer"));
  EXPECT_THAT(error_of({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}}),
              HasSubstr("SLURM_PROCID=4 is not a rank of SLURM_NTASKS=4"));
  EXPECT_THAT(error_of({{"OMPI_COMM_WORLD_RANK", "0"}}),
              HasSubstr("OMPI_COMM_WORLD_SIZE is not set but OMPI_COMM_WORLD_RANK is"));
  EXPECT_THAT(error_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}}),
              HasSubstr("MASTER_PORT=70000 is not a port"));
}

TEST(LaunchEnvTest, FirstSlurmHost) {
  EXPECT_EQ(first_slurm_host("node01"), "node01");
  EXPECT_EQ(first_slurm_host("node01,node02"), "node01");
  EXPECT_EQ(first_slurm_host("node[07-10,12],gpu1"), "node07");
  EXPECT_EQ(first_slurm_host("n[001-004]"), "n001");
  EXPECT_EQ(first_slurm_host("rack[2,4]-node[3-4]"), "rack2-node3");
  EXPECT_EQ(first_slurm_host("gpu[12]"), "gpu12");
}

}  // namespace
}  // namespace weft::dist

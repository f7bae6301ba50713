// FileStore beyond the shared Store contract (store_test.cc): several processes on one
// file, and files damaged by a writer that died or by something that is not a FileStore.
#include "weft/store/file_store.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "weft/base/unique_fd.h"

namespace weft::store {
namespace {

using namespace std::chrono_literals;
using testing::HasSubstr;

using test::fork_child;
using test::wait_child;

// How long a forked child may take before it counts as hung (and is killed).
constexpr Seconds kChildLimit{60};

void append_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::app) << bytes;
}

class FileStoreTest : public testing::Test {
 protected:
  test::TempDir dir_{"weft-store-test"};
  const std::string path_ = dir_.file("store");
};

TEST_F(FileStoreTest, ForkedProcessesAddConcurrently) {
  constexpr int kProcs = 4, kAdds = 1000;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcs; ++p) {
    children.push_back(fork_child([this, p] {
      FileStore store(path_);
      for (int i = 0; i < kAdds; ++i) store.add("counter", 1);
      store.set("done/" + std::to_string(p), "1");
    }));
  }
  FileStore store(path_);
  store.wait({"done/0", "done/1", "done/2", "done/3"}, 30s);
  for (pid_t c : children) EXPECT_EQ(wait_child(c, kChildLimit), 0);
  EXPECT_EQ(store.add("counter", 0), kProcs * kAdds);
  EXPECT_EQ(store.num_keys(), 1 + kProcs);
}

TEST_F(FileStoreTest, GetWaitsForAnotherProcess) {
  const pid_t child = fork_child([this] {
    std::this_thread::sleep_for(100ms);
    FileStore(path_).set("from-child", "hi");
  });
  FileStore store(path_);
  EXPECT_EQ(store.get("from-child"), "hi");
  EXPECT_EQ(wait_child(child, kChildLimit), 0);
}

TEST_F(FileStoreTest, TornRecordIsCutOff) {
  FileStore(path_).set("before", "1");
  // The first bytes of a record, as a writer killed in the middle of its write leaves them.
  append_bytes(path_, std::string("\x01\x00\x00\x00\x05\x00\x00", 7));
  {
    FileStore store(path_);
    EXPECT_EQ(store.get("before"), "1");
    store.set("after", "2");
  }
  FileStore fresh(path_);
  EXPECT_EQ(fresh.get("before"), "1");
  EXPECT_EQ(fresh.get("after"), "2");
  EXPECT_EQ(fresh.num_keys(), 2);
}

TEST_F(FileStoreTest, CorruptRecordIsReported) {
  FileStore(path_).set("key", "value");
  {
    std::fstream f(path_, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(-2, std::ios::end);
    f.put('X');  // inside the value
  }
  try {
    FileStore(path_).get("key");
    FAIL() << "expected weft::Error";
  } catch (const TimeoutError&) {
    FAIL() << "corruption must not look like a timeout";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("corrupt"));
    EXPECT_THAT(e.what(), HasSubstr(path_));
  }
}

TEST_F(FileStoreTest, ForeignFileIsRefused) {
  append_bytes(path_, "this is not a store at all");
  try {
    FileStore(path_).num_keys();
    FAIL() << "expected weft::Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not a version-1 FileStore file"));
  }
}

TEST_F(FileStoreTest, LockHeldElsewhereTimesOut) {
  FileStore store(path_);
  store.set("k", "v");
  // flock() excludes other open file descriptions, even in this process.
  UniqueFd other(::open(path_.c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(other);
  ASSERT_EQ(::flock(other.get(), LOCK_EX), 0);
  store.set_timeout(200ms);
  const auto start = Clock::now();
  try {
    store.set("k", "w");
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("could not lock"));
  }
  EXPECT_LT(Clock::now() - start, 1s);
  other.reset();  // releases the lock
  store.set("k", "w");
  EXPECT_EQ(store.get("k"), "w");
}

TEST_F(FileStoreTest, UnopenablePathThrowsSystemError) {
  EXPECT_THROW(FileStore(dir_.file("no/such/dir/store")), SystemError);
}

TEST_F(FileStoreTest, OversizedValueIsRefused) {
  FileStore store(path_);
  EXPECT_THROW(store.set("k", std::string((64 << 20) + 1, 'x')), InvalidArgument);
  EXPECT_EQ(store.num_keys(), 0);
}

}  // namespace
}  // namespace weft::store

// The distributed checkpoint's pieces on their own: the write plan, the read plan (every
// element read once, from the right file and offset, across layouts), the manifest's checks and
// the shard files' verification.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"
#include "weft/checkpoint/checksum.h"
#include "weft/checkpoint/file_io.h"
#include "weft/checkpoint/manifest.h"
#include "weft/checkpoint/plan.h"
#include "weft/checkpoint/shard_file.h"

namespace weft::checkpoint {
namespace {

using testing::HasSubstr;
namespace fs = std::filesystem;

// A layout: per rank, the boxes of one tensor it holds.
using Layout = std::vector<std::vector<Box>>;

const Shape kShape{12, 10};

Box rows(std::int64_t first, std::int64_t n) { return {{first, 0}, {n, 10}}; }
Box block(std::int64_t r, std::int64_t nr, std::int64_t c, std::int64_t nc) {
  return {{r, c}, {nr, nc}};
}

// The layouts weft's strategies make of a [12, 10] parameter.
std::vector<std::pair<std::string, Layout>> layouts() {
  return {
      {"one process", {{rows(0, 12)}}},
      {"FSDP 2", {{rows(0, 6)}, {rows(6, 6)}}},
      // FSDP 5: ceil(12 / 5) = 3 rows each, the last rank holds none.
      {"FSDP 5", {{rows(0, 3)}, {rows(3, 3)}, {rows(6, 3)}, {rows(9, 3)}, {}}},
      {"TP 2 (columns)", {{block(0, 12, 0, 5)}, {block(0, 12, 5, 5)}}},
      {"TP 2 x FSDP 2",
       {{block(0, 6, 0, 5)}, {block(0, 6, 5, 5)}, {block(6, 6, 0, 5)}, {block(6, 6, 5, 5)}}},
      {"DDP 2 (replicas)", {{rows(0, 12)}, {rows(0, 12)}}},
      {"HSDP 2 x 2", {{rows(0, 6)}, {rows(6, 6)}, {rows(0, 6)}, {rows(6, 6)}}},
  };
}

// Element i of the whole tensor holds i: a read from the wrong place shows.
Tensor values_of(const Box& box) {
  Tensor t = Tensor::zeros(box.sizes);
  float* p = t.data<float>();
  for (std::int64_t r = 0; r < box.sizes[0]; ++r) {
    for (std::int64_t c = 0; c < box.sizes[1]; ++c)
      *p++ = static_cast<float>((box.offsets[0] + r) * kShape[1] + box.offsets[1] + c);
  }
  return t;
}

class DistributedCheckpointTest : public testing::Test {
 protected:
  // Saves tensor "w" as `layout` holds it (each distinct piece once, as plan_writes says) into
  // a new directory; returns the directory.
  std::string save(const Layout& layout, const std::string& name) {
    const std::string dir = tmp_.file(name);
    fs::create_directories(dir);
    std::vector<std::vector<HeldPiece>> held(layout.size());
    for (std::size_t r = 0; r < layout.size(); ++r) {
      for (const Box& b : layout[r]) held[r].push_back({"w", b});
    }
    const auto writes = plan_writes(held, 4);
    Manifest m;
    m.world_size = static_cast<int>(layout.size());
    m.mesh = {{"dp", m.world_size}};
    TensorEntry& t = m.tensors["w"];
    t.shape = kShape;
    for (std::size_t r = 0; r < layout.size(); ++r) {
      std::vector<PieceData> pieces;
      for (std::size_t i = 0; i < layout[r].size(); ++i) {
        if (writes[r][i]) pieces.push_back({"w", layout[r][i], values_of(layout[r][i])});
      }
      if (pieces.empty()) continue;
      const std::string file = "rank-" + std::to_string(r) + ".safetensors";
      const WrittenFile f = write_shard_file((fs::path(dir) / file).string(), pieces, {});
      m.files.push_back({file, static_cast<int>(r), f.bytes, f.header_bytes, f.header_checksum});
      for (ChunkEntry c : f.chunks) {
        c.file = static_cast<int>(m.files.size()) - 1;
        t.chunks.push_back(c);
      }
    }
    write_text_file((fs::path(dir) / kManifestName).string(), to_json(m));
    return dir;
  }

  // Every rank of `layout` loads its pieces from `dir`.
  void load_and_check(const std::string& dir, const Layout& layout, const std::string& what) {
    const Manifest m =
        parse_manifest(read_text_file((fs::path(dir) / kManifestName).string(), 1 << 20), dir);
    for (const auto& boxes : layout) {
      std::vector<Target> targets;
      std::vector<Tensor> into;
      for (const Box& b : boxes) {
        targets.push_back({"w", b});
        into.push_back(Tensor::zeros(b.sizes));
      }
      const std::vector<Read> reads = plan_reads(m, targets);
      // Every element of every target exactly once, from inside the chunk read.
      for (std::size_t t = 0; t < targets.size(); ++t) {
        std::vector<int> count(static_cast<std::size_t>(targets[t].box.numel()), 0);
        for (const Read& r : reads) {
          if (r.target != t) continue;
          const Box& chunk = m.tensors.at("w").chunks[r.chunk].box;
          EXPECT_EQ(intersect(chunk, r.region), r.region) << what;
          EXPECT_EQ(intersect(targets[t].box, r.region), r.region) << what;
          for (std::int64_t i = 0; i < r.region.sizes[0]; ++i) {
            for (std::int64_t j = 0; j < r.region.sizes[1]; ++j) {
              const std::int64_t row = r.region.offsets[0] + i - targets[t].box.offsets[0];
              const std::int64_t col = r.region.offsets[1] + j - targets[t].box.offsets[1];
              ++count[static_cast<std::size_t>(row * targets[t].box.sizes[1] + col)];
            }
          }
        }
        for (int c : count) ASSERT_EQ(c, 1) << what;
      }
      execute_reads(dir, m, targets, reads, into);
      for (std::size_t t = 0; t < targets.size(); ++t) {
        EXPECT_EQ(into[t].to_vector<float>(), values_of(targets[t].box).to_vector<float>()) << what;
      }
    }
  }

  std::string load_error(const std::string& dir) {
    try {
      load_and_check(dir, {{rows(0, 12)}}, "damaged");
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "no error";
  }

  test::TempDir tmp_{"weft-dcp"};
};

TEST_F(DistributedCheckpointTest, EveryLayoutLoadsEveryOtherLayoutsCheckpoint) {
  int n = 0;
  for (const auto& [saved_name, saved] : layouts()) {
    const std::string dir = save(saved, "saved-" + std::to_string(n++));
    for (const auto& [loaded_name, loaded] : layouts())
      load_and_check(dir, loaded, saved_name + " loaded as " + loaded_name);
  }
}

TEST_F(DistributedCheckpointTest, ReplicasShareTheWriting) {
  // Two replicas of three tensors: each piece written once, the largest by one rank and the
  // other two by the other.
  std::vector<std::vector<HeldPiece>> held(2);
  for (auto& rank : held) {
    rank.push_back({"a", rows(0, 12)});
    rank.push_back({"b", rows(0, 6)});
    rank.push_back({"c", rows(0, 6)});
  }
  const auto writes = plan_writes(held, 4);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NE(writes[0][i], writes[1][i]) << i;
  EXPECT_NE(writes[0][0], writes[0][1]);
  EXPECT_EQ(writes[0][1], writes[0][2]);
  // Shards of one tensor: each rank writes its own.
  EXPECT_EQ(plan_writes({{{"w", rows(0, 6)}}, {{"w", rows(6, 6)}}}, 4),
            (std::vector<std::vector<bool>>{{true}, {true}}));
  EXPECT_THROW(plan_writes({{{"w", rows(0, 7)}}, {{"w", rows(6, 6)}}}, 4), InvalidArgument);
}

TEST_F(DistributedCheckpointTest, ManifestRoundTripsAndRejectsWhatIsWrong) {
  const std::string dir = save(layouts()[1].second, "fsdp");
  const std::string path = (fs::path(dir) / kManifestName).string();
  const std::string text = read_text_file(path, 1 << 20);
  const Manifest m = parse_manifest(text, path);
  EXPECT_EQ(to_json(m), text);
  const auto error = [&](Manifest bad) {
    try {
      parse_manifest(to_json(bad), path);
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Manifest missing = m;
  missing.tensors["w"].chunks.pop_back();
  EXPECT_THAT(error(missing), HasSubstr("a shard is missing"));
  Manifest overlap = m;
  overlap.tensors["w"].chunks[1].box = rows(5, 6);
  EXPECT_THAT(error(overlap), HasSubstr("overlap"));
  Manifest outside = m;
  outside.tensors["w"].chunks[1].box = rows(7, 6);
  EXPECT_THAT(error(outside), HasSubstr("outside its shape"));
  Manifest past_file = m;
  past_file.tensors["w"].chunks[0].end += 4;
  EXPECT_THAT(error(past_file), HasSubstr("bytes ["));
  Manifest step = m;
  step.step = -5;
  EXPECT_THAT(error(step), HasSubstr("at least 0"));
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string changed = text;
    const auto at = changed.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return changed.replace(at, from.size(), to);
  };
  const auto text_error = [&](const std::string& changed) {
    try {
      parse_manifest(changed, path);
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(text_error(replaced("\"version\": 2", "\"version\": 3")),
              HasSubstr("format version 3"));
  // The scalars carry no checksum of their own: the manifest's covers them.
  const auto drawn = [](std::int64_t n) { return "\"samples_drawn\": " + std::to_string(n); };
  EXPECT_THAT(text_error(replaced(drawn(m.samples_drawn), drawn(m.samples_drawn + 1))),
              HasSubstr("checksum does not match"));
  EXPECT_THAT(text_error(replaced("\"seed\": 0", "\"seed\": 1")),
              HasSubstr("checksum does not match"));
  // Version 1, written before the manifest had its own checksum, is still read.
  std::string v1 = replaced("\"version\": 2", "\"version\": 1");
  v1.erase(v1.find(",\n \"checksum\""), v1.rfind('}') - v1.find(",\n \"checksum\"") - 1);
  EXPECT_EQ(text_error(v1), "no error");
  EXPECT_THAT(text_error(replaced(",\n \"checksum\"", ",\n \"checksun\"")),
              HasSubstr("has no 'checksum'"));
  Manifest world = m;
  world.world_size = 3;
  EXPECT_THAT(error(world), HasSubstr("a mesh of 2 ranks in a world of 3"));
  Manifest file = m;
  file.files[0].name = "../elsewhere";
  EXPECT_THAT(error(file), HasSubstr("not a plain file name"));
  EXPECT_THROW(parse_manifest(text.substr(0, text.size() / 2), path), CheckpointError);
  EXPECT_THROW(parse_manifest("{}", path), CheckpointError);
  EXPECT_THROW(parse_checksum("xxh3-64:12", path), CheckpointError);
  EXPECT_EQ(parse_checksum(checksum_text(0xfedcba9876543210ull), path), 0xfedcba9876543210ull);
}

TEST_F(DistributedCheckpointTest, DamagedFilesAreNamed) {
  const auto damage = [&](const std::string& name, auto&& how) {
    const std::string dir = save(layouts()[1].second, name);
    how((fs::path(dir) / "rank-1.safetensors").string());
    return load_error(dir);
  };
  EXPECT_THAT(damage("flipped",
                     [](const std::string& f) {
                       std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
                       io.seekg(-7, std::ios::end);
                       const char c = static_cast<char>(io.get());
                       io.seekp(-7, std::ios::end);
                       io.put(static_cast<char>(c ^ 0x10));
                     }),
              HasSubstr("rank-1.safetensors is damaged: bytes ["));
  EXPECT_THAT(damage("header",
                     [](const std::string& f) {
                       std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
                       io.seekp(12);
                       io.put('#');
                     }),
              HasSubstr("header does not match its checksum"));
  EXPECT_THAT(
      damage("truncated", [](const std::string& f) { fs::resize_file(f, fs::file_size(f) - 1); }),
      HasSubstr("(cut short)"));
  EXPECT_THAT(damage("missing", [](const std::string& f) { fs::remove(f); }),
              HasSubstr("shard missing or unreadable"));
}

}  // namespace
}  // namespace weft::checkpoint

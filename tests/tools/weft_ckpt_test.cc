// weft-ckpt as a user runs it on a checkpoint weft-train wrote: inspect, verify (and what it
// says of a damaged file), consolidate into Hugging Face style files, and convert a
// single-file checkpoint of the earlier format into one a run resumes from exactly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "weft/checkpoint/file_io.h"
#include "weft/checkpoint/safetensors.h"
#include "weft/train/checkpointing.h"
#include "weft/train/hf_llama.h"
#include "weft/train/trainer.h"

namespace weft::train {
namespace {

using testing::HasSubstr;
namespace fs = std::filesystem;

class WeftCkptTest : public testing::Test {
 protected:
  WeftCkptTest() {
    Trainer(config(4), log_).run_until(2);  // a checkpoint of step 2, then interrupted
  }
  Config config(std::int64_t steps, std::vector<std::pair<std::string, std::string>> more = {}) {
    std::vector<std::pair<std::string, std::string>> all = {
        {"model.dim", "32"},
        {"model.n_layers", "2"},
        {"model.n_heads", "2"},
        {"model.max_seq_len", "32"},
        {"training.seq_len", "32"},
        {"training.batch_size", "4"},
        {"training.steps", std::to_string(steps)},
        {"training.dataset_path", WEFT_SOURCE_DIR "/data/tinyshakespeare.txt"},
        {"metrics.peak_gflops", "100"},
        {"validation.enable", "false"},
        {"checkpoint.enable", "true"},
        {"checkpoint.interval", "2"},
        {"checkpoint.folder", tmp_.file("ckpt")}};
    all.insert(all.end(), more.begin(), more.end());
    return load_config("", all);
  }
  test::Finished ckpt(const std::string& args) {
    std::vector<std::string> argv{WEFT_CKPT_TOOL};
    for (const std::string& w : test::words_of(args)) argv.push_back(w);
    return test::run(argv, {}, Seconds(30));
  }
  std::string step2() const { return tmp_.file("ckpt/step-00000002"); }

  test::TempDir tmp_{"weft-ckpt-tool"};
  std::ostringstream log_;
};

TEST_F(WeftCkptTest, InspectsAndVerifies) {
  const test::Finished inspect = ckpt("inspect --tensors " + tmp_.file("ckpt"));
  ASSERT_EQ(inspect.code, 0) << inspect.err;
  EXPECT_THAT(inspect.out, HasSubstr("step 2, optimizer steps 2, samples drawn 8"));
  EXPECT_THAT(inspect.out, HasSubstr("written by 1 rank"));
  EXPECT_THAT(inspect.out, HasSubstr("model.tok_embeddings.weight F32 [256, 32], 1 chunk"));
  const test::Finished ok = ckpt("verify " + step2());
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("ok: "));
  {
    std::fstream io(step2() + "/rank-00000.safetensors",
                    std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(-3, std::ios::end);
    io.put('\x7f');
  }
  const test::Finished bad = ckpt("verify " + step2());
  EXPECT_EQ(bad.code, 1);
  EXPECT_THAT(bad.err, HasSubstr("rank-00000.safetensors is damaged"));
}

// --deep finds what checksums cannot: chunks put in another tensor's place (each still
// matching its checksum), and state padded past its parameter's shape.
TEST_F(WeftCkptTest, DeepVerificationProvesTheFilesHoldTheModel) {
  const test::Finished ok = ckpt("verify --deep " + step2());
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("every tensor tiled exactly once by its chunks"));
  EXPECT_THAT(ok.out, HasSubstr("AdamW's two moments of each parameter"));

  // wq's and wk's chunks swapped in the manifest: a load would put each in the other's place.
  const std::string swapped = tmp_.file("swapped");
  fs::copy(step2(), swapped);
  checkpoint::Manifest m = read_manifest(swapped);
  std::swap(m.tensors.at("model.layers.0.attention.wq.weight").chunks[0],
            m.tensors.at("model.layers.0.attention.wk.weight").chunks[0]);
  fs::remove(swapped + "/manifest.json");
  checkpoint::write_text_file(swapped + "/manifest.json", checkpoint::to_json(m));
  EXPECT_EQ(ckpt("verify " + swapped).code, 0);
  const test::Finished caught = ckpt("verify --deep " + swapped);
  EXPECT_EQ(caught.code, 1);
  EXPECT_THAT(caught.err, HasSubstr("is where the manifest puts model.layers.0.attention.w"));

  // One moment zero-padded by two rows, consistently written: only the model's shapes tell.
  checkpoint::Manifest whole = read_manifest(step2());
  std::vector<checkpoint::PieceData> pieces;
  for (const auto& [name, t] : whole.tensors) {
    Shape shape = t.shape;
    const bool padded = name == "optim.exp_avg.layers.1.feed_forward.w2.weight";
    const Tensor value = read_pieces(
        step2(), whole, {{name, shape, std::vector<std::int64_t>(shape.size()), shape}})[0];
    if (padded) shape[0] += 2;
    Tensor saved = Tensor::zeros(shape);
    saved.narrow(0, 0, t.shape[0]).copy_from(value);
    pieces.push_back({name, {std::vector<std::int64_t>(shape.size()), shape}, saved});
  }
  const std::string dir = save_whole_checkpoint(tmp_.file("padded"), whole, pieces);
  EXPECT_EQ(ckpt("verify --deep " + step2()).code, 0);
  EXPECT_EQ(ckpt("verify " + dir).code, 0);
  const test::Finished padded = ckpt("verify --deep " + dir);
  EXPECT_EQ(padded.code, 1);
  EXPECT_THAT(padded.err, HasSubstr("optim.exp_avg.layers.1.feed_forward.w2.weight is [34, "));
}

TEST_F(WeftCkptTest, ConsolidatesIntoOneFileOrShardsWithAnIndex) {
  const test::Finished whole = ckpt("consolidate " + step2() + " " + tmp_.file("hf"));
  ASSERT_EQ(whole.code, 0) << whole.err;
  // Its progress, into a pipe: plain lines, no control codes.
  EXPECT_THAT(whole.err, HasSubstr(" tensors, "));
  EXPECT_THAT(whole.err, HasSubstr("(100%)\n"));
  EXPECT_EQ(whole.err.find_first_of("\r\x1b"), std::string::npos) << whole.err;
  const checkpoint::SafetensorsFile one =
      checkpoint::load_safetensors(tmp_.file("hf/model.safetensors"));
  nn::Llama model(config(4).model);
  load_model(step2(), model);
  ASSERT_EQ(one.tensors.size(), model.parameters().all().size());
  for (const auto& [name, value] : model.parameters().state_dict()) {
    EXPECT_EQ(one.at(hf_name(name)).to_vector<float>(),
              to_hf_layout(name, value, model.config()).to_vector<float>())
        << name;
  }
  std::ifstream config_json(tmp_.file("hf/config.json"));
  const nn::LlamaConfig hf = from_hf_config(nlohmann::json::parse(config_json), "config.json");
  EXPECT_EQ(hf.parameter_shapes(), model.config().parameter_shapes());

  const test::Finished sharded =
      ckpt("consolidate --max-shard-mb 0.05 " + step2() + " " + tmp_.file("shards"));
  ASSERT_EQ(sharded.code, 0) << sharded.err;
  std::ifstream in(tmp_.file("shards/model.safetensors.index.json"));
  const auto index = nlohmann::json::parse(in);
  EXPECT_EQ(index["weight_map"].size(), model.parameters().all().size());
  EXPECT_EQ(index["metadata"]["total_size"].get<std::int64_t>(), 4 * model.parameters().numel());
  for (const auto& [name, file] : index["weight_map"].items()) {
    const auto f = checkpoint::load_safetensors(tmp_.file("shards/" + file.get<std::string>()));
    const std::string weft = *weft_name(name);
    EXPECT_EQ(
        f.at(name).to_vector<float>(),
        to_hf_layout(weft, model.parameters().at(weft).value, model.config()).to_vector<float>());
  }
  // weft's own names and layout, AdamW's moments too.
  ASSERT_EQ(ckpt("consolidate --names weft --optimizer " + step2() + " " + tmp_.file("w")).code, 0);
  const auto own = checkpoint::load_safetensors(tmp_.file("w/model.safetensors"));
  EXPECT_EQ(own.at("layers.0.attention.wq.weight").to_vector<float>(),
            model.parameters().at("layers.0.attention.wq.weight").value.to_vector<float>());
  EXPECT_NO_THROW(own.at("optim.exp_avg.norm.weight"));
  EXPECT_EQ(ckpt("consolidate --optimizer " + step2() + " " + tmp_.file("x")).code, 2);

  // Into a folder an earlier consolidate wrote: its files go first, never both forms at once.
  ASSERT_EQ(ckpt("consolidate --max-shard-mb 0.05 " + step2() + " " + tmp_.file("hf")).code, 0);
  EXPECT_FALSE(fs::exists(tmp_.file("hf/model.safetensors")));
  ASSERT_EQ(ckpt("consolidate " + step2() + " " + tmp_.file("hf")).code, 0);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp_.file("hf")))
    left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"config.json", "model.safetensors"}));
}

// Hugging Face's layout and back: a run started from a consolidated folder
// (checkpoint.initial_load_path) holds the checkpoint's weights bitwise, from one file or
// shards; in bf16, the weights rounded.
TEST_F(WeftCkptTest, RunsStartFromConsolidatedFoldersBitwise) {
  nn::Llama saved(config(4).model);
  load_model(step2(), saved);
  ASSERT_EQ(ckpt("consolidate --max-shard-mb 0.05 " + step2() + " " + tmp_.file("hf")).code, 0);
  ASSERT_EQ(ckpt("consolidate --dtype bfloat16 " + step2() + " " + tmp_.file("bf16")).code, 0);
  for (const char* folder : {"hf", "bf16"}) {
    std::ostringstream log;
    Trainer fresh(config(4, {{"checkpoint.enable", "false"},
                             {"checkpoint.initial_load_path", tmp_.file(folder)}}),
                  log);
    EXPECT_THAT(log.str(), HasSubstr("loaded the initial weights from " + tmp_.file(folder)));
    for (const auto& [name, value] : saved.parameters().state_dict()) {
      std::vector<float> want = value.to_vector<float>();
      if (std::string(folder) == "bf16") {
        for (float& w : want) w = static_cast<float>(BFloat16(w));
      }
      EXPECT_EQ(fresh.model().parameters().at(name).value.to_vector<float>(), want)
          << folder << ": " << name;
    }
  }
  // Another model than the folder's: every differing field named.
  try {
    Trainer(config(4, {{"model.n_layers", "3"},
                       {"model.dim", "64"},
                       {"checkpoint.initial_load_path", tmp_.file("hf")}}),
            std::cout);
    ADD_FAILURE() << "loaded another model's weights";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.dim 64 (the folder: 32)"));
    EXPECT_THAT(e.what(), HasSubstr("model.n_layers 3 (the folder: 2)"));
  }
}

// The earlier format: step-<N>/checkpoint.safetensors with every tensor whole.
TEST_F(WeftCkptTest, ConvertsTheSingleFileFormat) {
  const checkpoint::Manifest m = read_manifest(step2());
  std::vector<parallel::StatePiece> layout;
  for (const auto& [name, t] : m.tensors)
    layout.push_back({name, t.shape, std::vector<std::int64_t>(t.shape.size()), t.shape});
  const std::vector<Tensor> values = read_pieces(step2(), m, layout);
  std::vector<checkpoint::NamedTensor> named;
  for (std::size_t i = 0; i < layout.size(); ++i) named.push_back({layout[i].name, values[i]});
  fs::create_directories(tmp_.file("old"));
  const std::string old = tmp_.file("old/checkpoint.safetensors");
  checkpoint::save_safetensors(old, named,
                               {{"format", "weft-train-checkpoint/1"},
                                {"step", "2"},
                                {"loader_batches", "2"},
                                {"optimizer_steps", "2"},
                                {"config", m.config}});
  const test::Finished ask = ckpt("convert " + old + " " + tmp_.file("converted"));
  EXPECT_EQ(ask.code, 2);
  EXPECT_THAT(ask.err, HasSubstr("give --data-parallel"));
  ASSERT_EQ(ckpt("convert --data-parallel 1 " + old + " " + tmp_.file("converted")).code, 0);
  ASSERT_EQ(ckpt("verify " + tmp_.file("converted")).code, 0);
  // Resumed from either, the run continues the same, bit for bit.
  std::vector<std::vector<double>> losses;
  for (const std::string& folder : {tmp_.file("ckpt"), tmp_.file("converted")}) {
    Trainer t(config(4, {{"checkpoint.resume", "true"},
                         {"checkpoint.enable", "false"},
                         {"checkpoint.folder", folder}}),
              log_);
    t.run();
    losses.push_back(t.losses());
  }
  ASSERT_EQ(losses[0].size(), 2u);
  EXPECT_EQ(losses[0], losses[1]);
}

}  // namespace
}  // namespace weft::train

#include "weft/checkpoint/plan.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "weft/base/error.h"

namespace weft::checkpoint {

std::vector<std::vector<bool>> plan_writes(const std::vector<std::vector<HeldPiece>>& held,
                                           std::int64_t element_bytes) {
  // The distinct pieces, each with the ranks that hold it.
  struct Distinct {
    const HeldPiece* piece;
    std::vector<std::pair<int, std::size_t>> holders;  // (rank, index in held[rank])
  };
  std::map<std::string, std::vector<Distinct>> by_tensor;
  for (std::size_t r = 0; r < held.size(); ++r) {
    for (std::size_t i = 0; i < held[r].size(); ++i) {
      const HeldPiece& p = held[r][i];
      std::vector<Distinct>& same = by_tensor[p.tensor];
      auto it = std::find_if(same.begin(), same.end(),
                             [&](const Distinct& d) { return d.piece->box == p.box; });
      if (it == same.end()) {
        for (const Distinct& d : same) {
          if (intersect(d.piece->box, p.box).numel() > 0) {
            throw InvalidArgument("checkpoint plan: pieces " + box_string(d.piece->box) + " and " +
                                  box_string(p.box) + " of " + p.tensor +
                                  " overlap without being equal");
          }
        }
        same.push_back({&p, {}});
        it = same.end() - 1;
      } else if (std::any_of(it->holders.begin(), it->holders.end(),
                             [&](const auto& h) { return h.first == static_cast<int>(r); })) {
        throw InvalidArgument("checkpoint plan: rank " + std::to_string(r) + " holds " + p.tensor +
                              " " + box_string(p.box) + " twice");
      }
      it->holders.emplace_back(static_cast<int>(r), i);
    }
  }
  std::vector<const Distinct*> order;
  for (const auto& [name, pieces] : by_tensor) {
    for (const Distinct& d : pieces) order.push_back(&d);
  }
  // Largest first (ties in name order, which the map gives): every rank sorts the same way.
  std::stable_sort(order.begin(), order.end(), [](const Distinct* a, const Distinct* b) {
    return a->piece->box.numel() > b->piece->box.numel();
  });
  std::vector<std::vector<bool>> writes(held.size());
  for (std::size_t r = 0; r < held.size(); ++r) writes[r].assign(held[r].size(), false);
  std::vector<std::int64_t> load(held.size(), 0);
  for (const Distinct* d : order) {
    const auto least =
        std::min_element(d->holders.begin(), d->holders.end(), [&](const auto& a, const auto& b) {
          return load[static_cast<std::size_t>(a.first)] < load[static_cast<std::size_t>(b.first)];
        });
    const auto rank = static_cast<std::size_t>(least->first);
    writes[rank][least->second] = true;
    load[rank] += d->piece->box.numel() * element_bytes;
  }
  return writes;
}

std::vector<Read> plan_reads(const Manifest& manifest, const std::vector<Target>& targets) {
  std::vector<Read> reads;
  for (std::size_t t = 0; t < targets.size(); ++t) {
    const Target& target = targets[t];
    const auto it = manifest.tensors.find(target.tensor);
    if (it == manifest.tensors.end()) {
      throw IncompatibleCheckpoint("the checkpoint has no tensor " + target.tensor +
                                   ", which this model has: the model configurations differ");
    }
    const TensorEntry& saved = it->second;
    const Box whole{Shape(saved.shape.size(), 0), saved.shape};
    if (target.box.offsets.size() != saved.shape.size() ||
        intersect(whole, target.box).numel() != target.box.numel()) {
      throw IncompatibleCheckpoint("tensor " + target.tensor + " is " + shape_string(saved.shape) +
                                   " in the checkpoint; this model needs its part " +
                                   box_string(target.box) + ": the model configurations differ");
    }
    for (std::size_t c = 0; c < saved.chunks.size(); ++c) {
      Box region = intersect(saved.chunks[c].box, target.box);
      if (region.numel() > 0) reads.push_back({t, c, std::move(region)});
    }
  }
  return reads;
}

}  // namespace weft::checkpoint

#include "weft/nn/parameter.h"

#include "weft/base/error.h"

namespace weft::nn {

Parameter& ParameterList::add(std::string name, const Shape& shape) {
  params_.push_back(std::make_unique<Parameter>(
      Parameter{std::move(name), Tensor::zeros(shape), Tensor::zeros(shape)}));
  return *params_.back();
}

Parameter& ParameterList::at(const std::string& name) {
  for (auto& p : params_) {
    if (p->name == name) return *p;
  }
  throw InvalidArgument("no parameter named '" + name + "'");
}

std::int64_t ParameterList::numel() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += p->value.numel();
  return n;
}

void ParameterList::zero_grad() {
  for (auto& p : params_) p->grad.fill(0);
}

}  // namespace weft::nn

// Units and flat views for ZeRO (chapter 07).
#include "zero/unit.hpp"

#include "core/error.hpp"

namespace tinyscale::zero {

std::vector<UnitPlan> plan_units(const nn::ParameterList& params, int n_layer) {
  TS_CHECK(n_layer >= 0, "plan_units: expected n_layer >= 0, found ", n_layer);
  std::vector<UnitPlan> units(static_cast<std::size_t>(n_layer) + 1);
  for (int i = 0; i < n_layer; ++i)
    units[static_cast<std::size_t>(n_layer - 1 - i)].name = "h." + std::to_string(i);
  units.back().name = "embeddings and head";
  for (std::size_t p = 0; p < params.size(); ++p) {
    const std::string& name = params[p].name;
    std::size_t unit = units.size() - 1;
    if (name.rfind("h.", 0) == 0) {
      const std::size_t dot = name.find('.', 2);
      const std::string digits = name.substr(2, dot == std::string::npos ? dot : dot - 2);
      TS_CHECK(!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos,
               "plan_units: expected a parameter named h.<block>.<name>, found '", name, "'");
      const int layer = std::stoi(digits);
      TS_CHECK(layer >= 0 && layer < n_layer, "plan_units: parameter '", name, "' names block ",
               layer, ", expected one of the model's ", n_layer, " blocks");
      unit = static_cast<std::size_t>(n_layer - 1 - layer);
    }
    units[unit].params.push_back(p);
  }
  for (const UnitPlan& u : units)
    TS_CHECK(!u.params.empty(), "plan_units: unit '", u.name, "' holds no parameter; expected ",
             "parameters named h.<i>.* for each of the ", n_layer, " blocks");
  return units;
}

Tensor storage_view(const std::shared_ptr<Storage>& storage, std::int64_t offset,
                    const Shape& shape, DType dtype) {
  TS_CHECK(offset >= 0 && static_cast<std::size_t>((offset + shape.numel()) *
                                                   static_cast<std::int64_t>(dtype_size(dtype))) <=
                              storage->bytes,
           "storage_view: expected ", shape.str(), " at element ", offset, " to fit in ",
           storage->bytes, " bytes");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->offset = offset;
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void point_into(const Tensor& param, const std::shared_ptr<Storage>& storage, std::int64_t offset) {
  Tensor view = storage_view(storage, offset, param.shape(), param.dtype());
  view.copy_(param); // the device's own copy: the storage lives where the parameter does
  view_into(param, storage, offset);
}

void view_into(const Tensor& param, const std::shared_ptr<Storage>& storage, std::int64_t offset) {
  TensorImpl& impl = param.impl();
  impl.storage = storage;
  impl.offset = offset;
}

} // namespace tinyscale::zero

// The one place a pool's runtime configuration picks a compiled instantiation. (No fmt here:
// nvcc compiles this header too and cannot evaluate fmt's compile-time format checks.)
#pragma once

#include <string>
#include <utility>

#include "format/shape.h"
#include "gphash/error.h"

namespace gphash::engine {

// Calls f.template operator()<ShapeType, KeyWidth>() for the pool's shape and key width.
template <class F>
decltype(auto) dispatch(format::TableShape shape, uint32_t key_width, F&& f) {
  auto by_width = [&]<class S>() -> decltype(auto) {
    switch (key_width) {
      case 8: return f.template operator()<S, 8>();
      case 16: return f.template operator()<S, 16>();
      case 32: return f.template operator()<S, 32>();
    }
    throw Error(ErrorCode::kInvalidArgument, "key width " + std::to_string(key_width) + " is not compiled in");
  };
  if (shape == format::TableShape{2, 2, 8}) return by_width.template operator()<format::Shape<2, 2, 8>>();
  if (shape == format::TableShape{4, 2, 4}) return by_width.template operator()<format::Shape<4, 2, 4>>();
  if (shape == format::TableShape{1, 4, 8}) return by_width.template operator()<format::Shape<1, 4, 8>>();
  throw Error(ErrorCode::kInvalidArgument, "shape " + to_string(shape) + " is not compiled in");
}

}  // namespace gphash::engine

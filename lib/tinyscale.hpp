// The whole public API of tinyscale's core in one include (chapter 01).
#pragma once

#include "autograd/engine.hpp"
#include "autograd/grad_mode.hpp"
#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/shape.hpp"
#include "core/tensor.hpp"
#include "moe/moe_layer.hpp"
#include "moe/router.hpp"
#include "nn/gpt.hpp"
#include "ops/ops.hpp"

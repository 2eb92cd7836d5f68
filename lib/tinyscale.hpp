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
#include "ops/ops.hpp"

// The interface the facade (gphash::Table) drives. Engines share the on-pool format and the
// batch semantics stated in gphash/ops.h; they differ in where the work runs.
#pragma once

#include <cstdint>
#include <string>

#include "gphash/ops.h"

namespace gphash::engine {

struct EngineStats {
  uint64_t resizes = 0;        // new levels added in this session
  uint64_t displacements = 0;  // items moved to make room for an insert
  uint64_t heap_grows = 0;     // heap chunks added in this session
  bool recovered = false;      // the pool was not shut down cleanly and recovery ran at open
  double open_seconds = 0;     // time to open (recovery included)
  double last_resize_seconds = 0;
  double last_batch_device_seconds = 0;  // GPU engine: device time of the last batch (events)
  // GPU engine: the last batch's device time by stage (plan = hash + sort; kernel = the parallel
  // pass; slow = displacement, resize and heap growth), and the open's mapping time.
  double last_plan_seconds = 0, last_kernel_seconds = 0, last_slow_seconds = 0;
  double open_map_seconds = 0;
  double recovery_seconds = 0;  // open: the recovery steps alone (zero when the pool was clean)
  // The live table's geometry (a GPU-memory table can be ahead of its pool until saved).
  uint64_t slots = 0;
  uint32_t bottom_level = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Runs a batch whose widths and arrays the facade has checked. Mutating batches are not run
  // concurrently with any other batch (the facade serialises them).
  virtual void execute(const Batch& batch) = 0;
  virtual uint64_t item_count() const = 0;
  virtual EngineStats stats() const = 0;
  virtual std::string name() const = 0;
  // Writes a table kept outside the pool (GPU-memory placement) back to it, crash-safely.
  // Engines that work in the pool have nothing to do.
  virtual void save() {}
  // Clean shutdown: makes everything durable and marks the pool clean. Idempotent.
  virtual void close() = 0;
};

}  // namespace gphash::engine

// Bytes that crossed a GPU's PCIe link while a benchmark ran, from NVML's PCIe throughput counters
// (the evaluation's "bytes moved over PCIe per operation"). NVML is loaded at run time, so no
// build depends on it; without it (or without a GPU) count() returns false and nothing is reported.
//
// How it measures: nvmlDeviceGetPcieThroughput returns the link's rate in KB/s over a 20 ms window
// (it waits for the window). One thread per direction calls it back to back and adds rate x
// elapsed time, so the windows tile the run. It is a sampled figure: runs shorter than a few
// hundred milliseconds are too coarse for it, and it counts everything on the link (the
// benchmark subtracts the copies it makes itself outside the timed calls).
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace gphash::bench {

class PcieCounter {
 public:
  PcieCounter() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib_) return;
    using Init = int (*)();
    using ByBusId = int (*)(const char*, void**);
    auto init = reinterpret_cast<Init>(dlsym(lib_, "nvmlInit_v2"));
    auto by_bus = reinterpret_cast<ByBusId>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    rate_ = reinterpret_cast<Rate>(dlsym(lib_, "nvmlDeviceGetPcieThroughput"));
    shutdown_ = reinterpret_cast<Init>(dlsym(lib_, "nvmlShutdown"));
    char bus[32] = {};
    int device = 0;
    if (!init || !by_bus || !rate_ || cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess || init() != 0)
      return;
    initialised_ = true;
    unsigned probe = 0;
    ok_ = by_bus(bus, &device_) == 0 && rate_(device_, kTx, &probe) == 0;
  }
  ~PcieCounter() {
    stop();
    if (initialised_ && shutdown_) shutdown_();
    if (lib_) dlclose(lib_);
  }
  PcieCounter(const PcieCounter&) = delete;
  PcieCounter& operator=(const PcieCounter&) = delete;

  bool available() const { return ok_; }

  void start() {
    stop();
    tx_bytes_ = rx_bytes_ = 0;
    if (!ok_) return;
    running_ = true;
    tx_thread_ = std::thread([this] { sample(kTx, tx_bytes_); });
    rx_thread_ = std::thread([this] { sample(kRx, rx_bytes_); });
  }
  // Stops sampling; false if NVML could not count. tx: GPU to host, rx: host to GPU.
  bool stop(double* tx_bytes = nullptr, double* rx_bytes = nullptr) {
    running_ = false;
    if (tx_thread_.joinable()) tx_thread_.join();
    if (rx_thread_.joinable()) rx_thread_.join();
    if (tx_bytes) *tx_bytes = tx_bytes_;
    if (rx_bytes) *rx_bytes = rx_bytes_;
    return ok_;
  }

 private:
  using Rate = int (*)(void*, int, unsigned*);
  static constexpr int kTx = 0, kRx = 1;  // NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES

  void sample(int counter, double& total) {
    auto last = std::chrono::steady_clock::now();
    while (running_) {
      unsigned kb_per_s = 0;
      const int rc = rate_(device_, counter, &kb_per_s);
      const auto now = std::chrono::steady_clock::now();
      if (rc == 0) total += 1024.0 * kb_per_s * std::chrono::duration<double>(now - last).count();
      last = now;
    }
  }

  void* lib_ = nullptr;
  void* device_ = nullptr;
  Rate rate_ = nullptr;
  int (*shutdown_)() = nullptr;
  bool initialised_ = false, ok_ = false;
  std::atomic<bool> running_{false};
  double tx_bytes_ = 0, rx_bytes_ = 0;
  std::thread tx_thread_, rx_thread_;
};

}  // namespace gphash::bench

// SlabList's kernels (one warp per operation) and its host side; the design is in slab_list.h.
#include "gpm/examples/slab_list.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "gphash/error.h"
#include "gpm/device_memory.cuh"

namespace gphash::gpm::workloads {

namespace {

namespace fg = format::gpm;
using SL = SlabList;

constexpr unsigned kFull = 0xFFFFFFFFu;
constexpr uint64_t kNone = ~uint64_t{0};
// counters_ in GPU memory.
constexpr int kItems = 0, kFailed = 1, kErrors = 2, kErased = 3, kCounters = 4;

void check(cudaError_t err, const char* what) { mapping_check(err, what); }

[[noreturn]] void invalid(const std::string& field, const std::string& why) {
  throw Error(ErrorCode::kInvalidArgument, "SlabList: " + why, field);
}

// What the kernels take, by value.
struct View {
  uint64_t* slabs;
  uint64_t* values;
  uint64_t* counter;  // the allocation counter, in the meta region
  uint64_t buckets;
  uint64_t slabs_total;
  uint32_t value_words;
  unsigned* locks;  // GPU memory: one per bucket, then the allocation lock
  unsigned long long* counters;
};

// commit()'s memory policy with the old values of a run of words read ahead by the warp's lanes
// at once. Under the bucket lock they are the words' current values, so the undo entries are the
// same; an update of a 128-byte value then waits for one PCIe round trip instead of 16 in a row.
struct PrefetchedMemory {
  DeviceWrites w;
  const uint64_t* base;
  const uint64_t* old;  // old values of base[0 .. count)
  uint32_t count;
  __device__ void store(uint64_t* p, uint64_t v) const { w.store(p, v); }
  __device__ uint64_t load(const uint64_t* p) const {
    if (p >= base && p < base + count) return old[p - base];
    return w.load(p);
  }
  __device__ void barrier() const { w.barrier(); }
  __device__ unsigned long long reserve(unsigned long long* counter, uint32_t n) const {
    return atomicAdd(counter, static_cast<unsigned long long>(n));
  }
};

// Lane 0 only. The fences order the holder's pool accesses after taking and before giving back.
__device__ void lock(unsigned* l) {
  while (atomicCAS(l, 0u, 1u) != 0u) __nanosleep(64);
  __threadfence();
}
__device__ void unlock(unsigned* l) {
  __threadfence();
  atomicExch(l, 0u);
}

struct Probe {
  uint64_t slab = kNone;  // where the key is
  int slot = -1;
  uint64_t hole_slab = kNone;  // the first empty key slot of the chain
  int hole = -1;
  uint64_t tail = 0;  // the chain's last slab
  bool bad = false;   // a next pointer outside the overflow slabs, or a cycle
};

// The whole warp walks bucket b's chain: lanes 0..15 read one slab (128 bytes, one access), a
// ballot finds the key and the empty slots, lane 15's word is the next pointer. Every value the
// warp branches on comes from a ballot or a shuffle, so the warp stays converged.
__device__ Probe probe(const View& t, const DeviceWrites& w, uint64_t key, uint64_t b, uint32_t lane) {
  Probe p;
  uint64_t s = b;
  for (uint64_t steps = 0;; ++steps) {
    const uint64_t word = lane < SL::kSlabWords ? w.load(&t.slabs[s * SL::kSlabWords + lane]) : 0;
    const unsigned hit = __ballot_sync(kFull, lane < SL::kKeysPerSlab && word == key);
    const unsigned empty = __ballot_sync(kFull, lane < SL::kKeysPerSlab && word == 0);
    const uint64_t next = __shfl_sync(kFull, word, SL::kNextWord);
    p.tail = s;
    if (hit) {
      p.slab = s;
      p.slot = __ffs(static_cast<int>(hit)) - 1;
      return p;
    }
    if (empty && p.hole < 0) {
      p.hole_slab = s;
      p.hole = __ffs(static_cast<int>(empty)) - 1;
    }
    if (next == 0) return p;
    if (next < t.buckets || next >= t.slabs_total || steps >= t.slabs_total) {
      p.bad = true;
      return p;
    }
    s = next;
  }
}

__device__ uint64_t* key_word(const View& t, uint64_t slab, int slot) { return &t.slabs[slab * SL::kSlabWords + slot]; }
__device__ uint64_t* value_of(const View& t, uint64_t slab, int slot) {
  return &t.values[(slab * SL::kKeysPerSlab + static_cast<uint64_t>(slot)) * t.value_words];
}

// SET: insert or assign. Slot of the log = the warp's index; k counts its operations in the launch.
// At most 256 threads and 4 blocks per SM: 64 registers, no spills (sm_90).
__global__ void __launch_bounds__(256, 4) slab_set(View t, LogView log, DeviceWrites w, const uint64_t* keys, const uint64_t* values, uint64_t n,
                         uint8_t* status) {
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t warp = (blockIdx.x * uint64_t{blockDim.x} + threadIdx.x) / 32;
  const uint64_t warps = uint64_t{gridDim.x} * blockDim.x / 32;
  const uint32_t vw = t.value_words;
  const bool undo = log.mode == fg::kModeUndo;
  uint64_t k = 0;
  for (uint64_t i = warp; i < n; i += warps, ++k) {
    const uint64_t key = keys[i];
    if (key == 0) {
      if (lane == 0) {
        if (status) status[i] = SL::kBadKey;
        atomicAdd(&t.counters[kFailed], 1ull);
      }
      continue;
    }
    const uint64_t mine = lane < vw ? values[i * vw + lane] : 0;  // lane x: the new value's word x
    const uint64_t b = SL::bucket_of(key, t.buckets);
    if (lane == 0) lock(&t.locks[b]);
    __syncwarp();
    const Probe p = probe(t, w, key, b, lane);
    uint8_t st = SL::kOk;
    bool committed = true, added = false;
    if (p.bad) {
      st = SL::kNoRoom;
      if (lane == 0) atomicAdd(&t.counters[kErrors], 1ull);
    } else if (p.slot >= 0) {
      // Update in place: the value words are the transaction.
      uint64_t* at = value_of(t, p.slab, p.slot);
      const uint64_t old = undo && lane < vw ? w.load(at + lane) : 0;
      uint64_t olds[SL::kMaxTxWrites], news[SL::kMaxTxWrites];
      for (uint32_t x = 0; x < vw; ++x) {
        olds[x] = __shfl_sync(kFull, old, x);
        news[x] = __shfl_sync(kFull, mine, x);
      }
      if (lane == 0) {
        auto tx = begin<SL::kMaxTxWrites>(log, warp, k);
        for (uint32_t x = 0; x < vw; ++x) tx.write(at + x, news[x]);
        committed = commit(log, PrefetchedMemory{w, at, olds, vw}, tx);
      }
    } else if (p.hole >= 0) {
      // Into an empty slot: the value first (unlogged: no key names the slot), then the key word.
      if (lane < vw) w.store(value_of(t, p.hole_slab, p.hole) + lane, mine);
      w.barrier();  // every lane's value word is durable before the key can name it
      __syncwarp();
      if (lane == 0) {
        auto tx = begin<SL::kMaxTxWrites>(log, warp, k);
        tx.write(key_word(t, p.hole_slab, p.hole), key);
        added = committed = commit(log, DeviceMemory{w}, tx);
      }
    } else {
      // Append slab c = counter: its value (unlogged: slab c is unreachable), then the counter,
      // the tail's next pointer and the key word as one transaction.
      uint64_t c = 0;
      if (lane == 0) {
        lock(&t.locks[t.buckets]);
        c = w.load(t.counter);
      }
      c = __shfl_sync(kFull, c, 0);
      if (c >= t.slabs_total || c < t.buckets) {
        st = SL::kNoRoom;
        if (lane == 0) {
          if (c < t.buckets) atomicAdd(&t.counters[kErrors], 1ull);
          unlock(&t.locks[t.buckets]);
        }
      } else {
        if (lane < vw) w.store(value_of(t, c, 0) + lane, mine);
        w.barrier();
        __syncwarp();
        if (lane == 0) {
          auto tx = begin<SL::kMaxTxWrites>(log, warp, k);
          tx.write(t.counter, c + 1);
          tx.write(key_word(t, p.tail, SL::kNextWord), c);
          tx.write(key_word(t, c, 0), key);
          added = committed = commit(log, DeviceMemory{w}, tx);
          unlock(&t.locks[t.buckets]);  // after the commit: the next appender reads the new counter
        }
      }
    }
    if (lane == 0) {
      if (!committed) st = SL::kNoRoom;  // a conventional partition was full (the host throws)
      if (added) atomicAdd(&t.counters[kItems], 1ull);
      if (st != SL::kOk) atomicAdd(&t.counters[kFailed], 1ull);
      if (status) status[i] = st;
      unlock(&t.locks[b]);
    }
    __syncwarp();
  }
}

__global__ void __launch_bounds__(256, 4) slab_erase(View t, LogView log, DeviceWrites w, const uint64_t* keys, uint64_t n, uint8_t* status) {
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t warp = (blockIdx.x * uint64_t{blockDim.x} + threadIdx.x) / 32;
  const uint64_t warps = uint64_t{gridDim.x} * blockDim.x / 32;
  uint64_t k = 0;
  for (uint64_t i = warp; i < n; i += warps, ++k) {
    const uint64_t key = keys[i];
    if (key == 0) {
      if (lane == 0 && status) status[i] = SL::kNotFound;
      continue;
    }
    const uint64_t b = SL::bucket_of(key, t.buckets);
    if (lane == 0) lock(&t.locks[b]);
    __syncwarp();
    const Probe p = probe(t, w, key, b, lane);
    if (lane == 0) {
      uint8_t st = SL::kNotFound;
      if (p.bad) atomicAdd(&t.counters[kErrors], 1ull);
      if (p.slot >= 0) {
        auto tx = begin<SL::kMaxTxWrites>(log, warp, k);
        tx.write(key_word(t, p.slab, p.slot), 0);  // the slot is empty again; its value is dead
        if (commit(log, DeviceMemory{w}, tx)) {
          st = SL::kOk;
          atomicAdd(&t.counters[kItems], ~0ull);  // minus one
          atomicAdd(&t.counters[kErased], 1ull);
        }
      }
      if (status) status[i] = st;
      unlock(&t.locks[b]);
    }
    __syncwarp();
  }
}

// No locks: no write runs beside a get (the calls are launches on one stream).
__global__ void __launch_bounds__(256, 4) slab_get(View t, DeviceWrites w, const uint64_t* keys, uint64_t* out, uint8_t* found, uint64_t n) {
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t warp = (blockIdx.x * uint64_t{blockDim.x} + threadIdx.x) / 32;
  const uint64_t warps = uint64_t{gridDim.x} * blockDim.x / 32;
  const uint32_t vw = t.value_words;
  for (uint64_t i = warp; i < n; i += warps) {
    const uint64_t key = keys[i];
    if (key == 0) {
      if (lane == 0) found[i] = 0;
      continue;
    }
    const Probe p = probe(t, w, key, SL::bucket_of(key, t.buckets), lane);
    if (p.slot >= 0 && lane < vw) out[i * vw + lane] = w.load(value_of(t, p.slab, p.slot) + lane);
    if (lane == 0) {
      found[i] = p.slot >= 0;
      if (p.bad) atomicAdd(&t.counters[kErrors], 1ull);
    }
  }
}

}  // namespace

SlabList::Geometry SlabList::geometry_for(uint64_t capacity, uint32_t value_width) {
  Geometry g;
  g.buckets = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(static_cast<double>(capacity) / (kKeysPerSlab * kTargetFill))));
  g.slabs = g.buckets + std::max<uint64_t>(g.buckets / 2, 64);
  g.value_width = value_width;
  return g;
}

SlabList::SlabList(GpmPool& gp, DeviceGpm& dev, const std::string& name, bool create, const Geometry& geometry,
                   LogChoice log, uint64_t max_batch, Launch launch)
    : gp_(gp), dev_(dev), launch_(launch) {
  if (launch.blocks == 0 || launch.threads == 0 || launch.threads % 32 || launch.threads > 256)
    invalid("launch", "threads per block must be a multiple of 32 in 32..256 (the kernels' launch bounds)");
  if (max_batch == 0) invalid("max_batch", "max_batch must be positive");
  if (name.empty() || name.size() > 24) invalid("name", "the name needs 1..24 bytes");
  const uint64_t warps = launch.slots() / 32;
  Region meta, slabs, values;
  if (create) {
    const Geometry& g = geometry;
    if (g.value_width < 8 || g.value_width > kMaxValueWidth || g.value_width % 8)
      invalid("value_width", "value width " + std::to_string(g.value_width) + " is not a multiple of 8 in 8..128");
    if (g.buckets == 0 || g.slabs < g.buckets || g.slabs > (uint64_t{1} << 40))
      invalid("slabs", "needs 1 <= buckets <= slabs <= 2^40");
    meta = gp.create_region(name + ".meta", 4096);
    slabs = gp.create_region(name + ".slabs", g.slabs * kSlabWords * 8);
    values = gp.create_region(name + ".values", g.slabs * kKeysPerSlab * g.value_width);
    // The geometry and counter first, the magic last: a pool whose meta has the magic is whole.
    auto* m = reinterpret_cast<uint64_t*>(meta.host);
    m[1] = g.buckets;
    m[2] = g.slabs;
    m[3] = g.value_width;
    m[kCounterWord] = g.buckets;
    gp.pool().persist(m, 8 * (kCounterWord + 1));
    gp.pool().sync();
    reinterpret_cast<volatile uint64_t*>(m)[0] = kMagic;
    gp.pool().persist(m, 8);
    gp.pool().sync();
    geometry_ = g;
    LogOptions o;
    o.layout = log.layout;
    o.mode = log.mode;
    o.slots = (warps + 31) / 32 * 32;  // one per warp, whole groups of 32 (HCL)
    o.entries_per_slot = std::max<uint32_t>(g.value_width / 8, 3);
    o.partition_threads = 32;  // conventional: 32 warps per partition
    o.partition_entries = ((max_batch + warps - 1) / warps + 2) * 32 * o.entries_per_slot;
    log_ = gp.create_log(name + ".log", o);
  } else {
    meta = gp.region(name + ".meta");
    slabs = gp.region(name + ".slabs");
    values = gp.region(name + ".values");
    const auto* m = reinterpret_cast<const uint64_t*>(meta.host);
    if (m[0] != kMagic) throw Error(ErrorCode::kCorruptTable, "SlabList \"" + name + "\": the meta region has no magic", name);
    geometry_ = {m[1], m[2], static_cast<uint32_t>(m[3])};
    const Geometry& g = geometry_;
    if (g.buckets == 0 || g.slabs < g.buckets || g.slabs > (uint64_t{1} << 40) || g.value_width < 8 ||
        g.value_width > kMaxValueWidth || g.value_width % 8 || slabs.bytes < g.slabs * kSlabWords * 8 ||
        values.bytes < g.slabs * kKeysPerSlab * g.value_width || m[kCounterWord] < g.buckets ||
        m[kCounterWord] > g.slabs)
      throw Error(ErrorCode::kCorruptTable, "SlabList \"" + name + "\": the geometry in its meta region is impossible", name);
    log_ = gp.log(name + ".log");
  }
  const uint32_t entries = std::max<uint32_t>(geometry_.value_width / 8, 3);
  const fg::LogHeader& h = log_.header;
  if (h.slots < warps || h.entries_per_slot < entries || (h.layout == kLayoutConventional && h.partition_threads != 32))
    invalid("launch", "the log \"" + log_.name + "\" was made for another launch geometry or value width");
  // Operations per launch: k (a warp's transactions in a launch) stays below 2^20, and a
  // conventional partition (32 warps) holds a launch's entries.
  chunk_ = std::min<uint64_t>(max_batch, warps * (fg::kMaxTxPerLaunch - 1));
  if (h.layout == kLayoutConventional) {
    const uint64_t per_warp = h.partition_entries / (uint64_t{32} * entries);
    if (per_warp < 1) invalid("max_batch", "the conventional log's partitions are too small");
    chunk_ = std::min<uint64_t>(chunk_, per_warp * warps);
  }
  meta_ = reinterpret_cast<uint64_t*>(dev.map(meta));
  slabs_ = reinterpret_cast<uint64_t*>(dev.map(slabs));
  values_ = reinterpret_cast<uint64_t*>(dev.map(values));
  // GPU-memory state starts afresh at every open: no lock held, the item count from the slabs.
  check(cudaMalloc(&locks_, (geometry_.buckets + 1) * sizeof(unsigned)), "cudaMalloc");
  check(cudaMalloc(&counters_, kCounters * sizeof(unsigned long long)), "cudaMalloc");
  check(cudaMemset(locks_, 0, (geometry_.buckets + 1) * sizeof(unsigned)), "cudaMemset");
  unsigned long long init[kCounters] = {host_count(), 0, 0, 0};
  check(cudaMemcpy(counters_, init, sizeof init, cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

SlabList::~SlabList() {
  cudaFree(locks_);
  cudaFree(counters_);
}

void SlabList::finish(cudaStream_t stream, const char* what) {
  check(cudaGetLastError(), what);
  drain(gp_, stream);
  if (dev_.log_full())
    throw Error(ErrorCode::kNoSpace, std::string(what) + ": a conventional log partition was full; size the log for the batch");
}

namespace {
unsigned grid_for(uint64_t n, Launch launch) {
  const uint64_t warps_per_block = launch.threads / 32;
  return static_cast<unsigned>(std::min<uint64_t>(launch.blocks, (n + warps_per_block - 1) / warps_per_block));
}
}  // namespace

uint64_t SlabList::set(const uint64_t* d_keys, const uint64_t* d_values, uint64_t n, uint8_t* d_status, cudaStream_t stream) {
  if (n == 0) return 0;
  const View v{slabs_, values_, meta_ + kCounterWord, geometry_.buckets, geometry_.slabs, geometry_.value_width / 8,
               locks_, counters_};
  check(cudaMemsetAsync(counters_ + kFailed, 0, sizeof(unsigned long long), stream), "cudaMemsetAsync");
  for (uint64_t off = 0; off < n; off += chunk_) {
    const uint64_t m = std::min(chunk_, n - off);
    const LogView lv = dev_.launch(log_, stream);
    slab_set<<<grid_for(m, launch_), launch_.threads, 0, stream>>>(v, lv, dev_.writes(), d_keys + off,
                                                                    d_values + off * v.value_words, m,
                                                                    d_status ? d_status + off : nullptr);
    finish(stream, "SlabList set");
  }
  unsigned long long c[kCounters];
  check(cudaMemcpy(c, counters_, sizeof c, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (c[kErrors])
    throw Error(ErrorCode::kCorruptTable, "SlabList: a chain has a next pointer outside the slab pool, or the counter is wrong");
  return c[kFailed];
}

void SlabList::get(const uint64_t* d_keys, uint64_t* d_values_out, uint8_t* d_found, uint64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const View v{slabs_, values_, meta_ + kCounterWord, geometry_.buckets, geometry_.slabs, geometry_.value_width / 8,
               locks_, counters_};
  slab_get<<<grid_for(n, launch_), launch_.threads, 0, stream>>>(v, dev_.writes(), d_keys, d_values_out, d_found, n);
  check(cudaGetLastError(), "SlabList get");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

uint64_t SlabList::erase(const uint64_t* d_keys, uint64_t n, uint8_t* d_status, cudaStream_t stream) {
  if (n == 0) return 0;
  const View v{slabs_, values_, meta_ + kCounterWord, geometry_.buckets, geometry_.slabs, geometry_.value_width / 8,
               locks_, counters_};
  check(cudaMemsetAsync(counters_ + kErased, 0, sizeof(unsigned long long), stream), "cudaMemsetAsync");
  for (uint64_t off = 0; off < n; off += chunk_) {
    const uint64_t m = std::min(chunk_, n - off);
    const LogView lv = dev_.launch(log_, stream);
    slab_erase<<<grid_for(m, launch_), launch_.threads, 0, stream>>>(v, lv, dev_.writes(), d_keys + off, m,
                                                                      d_status ? d_status + off : nullptr);
    finish(stream, "SlabList erase");
  }
  unsigned long long c[kCounters];
  check(cudaMemcpy(c, counters_, sizeof c, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (c[kErrors]) throw Error(ErrorCode::kCorruptTable, "SlabList: a chain has a next pointer outside the slab pool");
  return c[kErased];
}

uint64_t SlabList::size() const {
  unsigned long long items = 0;
  check(cudaMemcpy(&items, counters_ + kItems, sizeof items, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return items;
}

uint64_t SlabList::slabs_in_use() const { return *reinterpret_cast<const volatile uint64_t*>(meta_ + kCounterWord); }

double SlabList::load_factor() const {
  return static_cast<double>(size()) / (static_cast<double>(kKeysPerSlab) * static_cast<double>(slabs_in_use()));
}

bool SlabList::host_find(uint64_t key, uint64_t* slab, uint32_t* slot) const {
  if (key == 0) return false;
  uint64_t s = bucket_of(key, geometry_.buckets);
  for (uint64_t steps = 0; steps <= geometry_.slabs; ++steps) {
    const uint64_t* w = slabs_ + s * kSlabWords;
    for (uint32_t j = 0; j < kKeysPerSlab; ++j)
      if (w[j] == key) {
        *slab = s;
        *slot = j;
        return true;
      }
    const uint64_t next = w[kNextWord];
    if (next == 0 || next < geometry_.buckets || next >= geometry_.slabs) return false;
    s = next;
  }
  return false;
}

uint64_t SlabList::host_count() const {
  const uint64_t used = std::min(slabs_in_use(), geometry_.slabs);
  uint64_t n = 0;
  for (uint64_t s = 0; s < used; ++s)
    for (uint32_t j = 0; j < kKeysPerSlab; ++j) n += slabs_[s * kSlabWords + j] != 0;
  return n;
}

void BatchPlan::build(const Kind* kinds, const uint64_t* keys, size_t n) {
  gets.clear();
  sets.clear();
  erases.clear();
  kinds_.assign(kinds, kinds + n);
  prior_.assign(n, -1);
  pos_.assign(n, -1);
  final_.assign(n, 0);
  last_.clear();
  last_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t& last = last_.try_emplace(keys[i], -1).first->second;
    prior_[i] = last;
    if (kinds[i] != kGet) last = static_cast<int64_t>(i);
  }
  for (size_t i = 0; i < n; ++i) {
    if (kinds[i] == kGet) {
      if (prior_[i] < 0) {
        pos_[i] = static_cast<int64_t>(gets.size());
        gets.push_back(i);
      }
    } else if (last_.find(keys[i])->second == static_cast<int64_t>(i)) {
      final_[i] = 1;
      std::vector<uint64_t>& to = kinds[i] == kSet ? sets : erases;
      pos_[i] = static_cast<int64_t>(to.size());
      to.push_back(i);
    } else if (kinds[i] == kErase && prior_[i] < 0) {
      // A superseded erase with no earlier write: whether it found its key is the table's state.
      pos_[i] = static_cast<int64_t>(gets.size());
      gets.push_back(i);
    }
  }
}

}  // namespace gphash::gpm::workloads

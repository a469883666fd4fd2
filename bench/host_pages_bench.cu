// host_pages_bench: how fast the GPU reads host memory at random, by how that memory is backed,
// how large the region is and in what order the reads come.
//
// Every GPU path of gphash that touches host memory (the host-mapped index, the embedding
// store's row gather) reads it in pieces of 8 to 512 bytes. This measures that rate against:
//   the backing (--kinds): shm (a file in /dev/shm mapped shared and registered, as pools and
//     row files are), shm-advise (the same with MADV_HUGEPAGE), thp (anonymous memory with
//     MADV_HUGEPAGE), hostalloc (cudaHostAlloc), hugetlbfs (a file on the mount given with
//     --hugetlbfs; reserve 2 MiB pages first); the share of huge pages is read from smaps;
//   the region's size (--sizes, MiB): does it fit what caches the address translations?
//   the order (--patterns): random; sorted:B, batches of B pieces in increasing address order
//     spread over the whole region (a batch sorted by address); sequential;
//   the reader (--readers): ilp1, ilp4: 16-byte ld.global.cg loads (L2 only; a warp reads 512
//     bytes per instruction as 512/granule pieces, 1 or 4 instructions in flight); tma: Hopper's
//     bulk copies (cp.async.bulk into shared memory, 16 pieces per warp per round); st, st-fence:
//     not reads but 8-byte stores (a warp writes 256 bytes per instruction as 256/granule pieces,
//     granules from 8 bytes), st-fence with a system fence after each round, as a warp that
//     persists its writes makes (the host-mapped index's updates write 8-byte value words into
//     random buckets: is their rate the region's translations or the link's?).
// Also a pinned host-to-device copy of 1 GiB, the link's ceiling. One line per measurement; all
// of them as JSON with --json. H200 results: bench/results/2026-11-28-bucket-order.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 bench/host_pages_bench.cu -o host_pages_bench   (or the CMake target)
//   ./host_pages_bench --sizes 64,1024,8192 --granules 32,128,256 --patterns random,sorted:1048576
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// Where piece p (numbered in the order the GPU reaches them: round-major over all warps, which
// are all resident) lies, as a piece index: at random; sorted in batches of `batch` pieces (a
// batch's pieces spread over the whole region in increasing order, as a batch sorted by address
// would be); or sequentially.
enum Pattern : int { kRandom = 0, kSorted = 1, kSequential = 2 };
__device__ __forceinline__ uint64_t piece_at(uint64_t p, uint64_t pieces, int pattern, uint64_t batch) {
  if (pattern == kSequential) return p % pieces;
  const uint64_t h = mix64(p);
  if (pattern == kRandom) return h % pieces;
  const uint64_t span = pieces / batch;  // pieces per position of a batch
  return (p % batch) * span + h % span;
}

// Loads: each lane belongs to a piece of `granule` bytes (granule/16 lanes); each instruction of
// a warp reads 512/granule pieces. ILP independent instructions per round.
template <int ILP>
__global__ void load_reads(const unsigned char* base, uint64_t pieces, uint32_t granule, uint64_t rounds, int pattern,
                           uint64_t batch, unsigned long long* sink) {
  const uint32_t lanes_per_piece = granule / 16, per_warp = 32 / lanes_per_piece;
  const uint32_t lane = threadIdx.x & 31, piece_in_warp = lane / lanes_per_piece, part = lane % lanes_per_piece;
  const uint64_t warp = (uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32, warps = uint64_t{gridDim.x} * blockDim.x / 32;
  uint32_t acc = 0;
  for (uint64_t r = 0; r < rounds; ++r) {
    uint4 v[ILP];
#pragma unroll
    for (int k = 0; k < ILP; ++k) {
      const uint64_t p = ((r * warps + warp) * ILP + k) * per_warp + piece_in_warp;
      const uint64_t off = piece_at(p, pieces, pattern, batch) * granule + part * 16;
      v[k] = __ldcg(reinterpret_cast<const uint4*>(base + off));
    }
#pragma unroll
    for (int k = 0; k < ILP; ++k) acc ^= v[k].x ^ v[k].w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1ull);  // keeps the loads alive
}

// Stores: each lane writes 8 bytes of a piece of `granule` bytes (granule/8 lanes); each
// instruction of a warp writes 256/granule pieces. With kFence a system fence ends each round.
template <bool kFence>
__global__ void store_writes(unsigned char* base, uint64_t pieces, uint32_t granule, uint64_t rounds, int pattern,
                             uint64_t batch) {
  const uint32_t lanes_per_piece = granule / 8, per_warp = 32 / lanes_per_piece;
  const uint32_t lane = threadIdx.x & 31, piece_in_warp = lane / lanes_per_piece, part = lane % lanes_per_piece;
  const uint64_t warp = (uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32, warps = uint64_t{gridDim.x} * blockDim.x / 32;
  for (uint64_t r = 0; r < rounds; ++r) {
    const uint64_t p = (r * warps + warp) * per_warp + piece_in_warp;
    const uint64_t off = piece_at(p, pieces, pattern, batch) * granule + part * 8;
    *reinterpret_cast<volatile uint64_t*>(base + off) = p;
    if constexpr (kFence) __threadfence_system();
  }
}

// Bulk copies (Hopper's TMA, cp.async.bulk): lane 0 of each warp copies 16 pieces per round
// into the warp's shared memory and waits on an mbarrier for their bytes.
constexpr int kTmaPieces = 16, kTmaWarps = 8;
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__global__ void tma_reads(const unsigned char* base, uint64_t pieces, uint32_t granule, uint64_t rounds, int pattern,
                          uint64_t batch, unsigned long long* sink) {
  extern __shared__ __align__(128) unsigned char stage[];
  __shared__ __align__(8) uint64_t bars[kTmaWarps];
  const uint32_t lane = threadIdx.x & 31, wib = threadIdx.x / 32;
  const uint64_t warp = (uint64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32, warps = uint64_t{gridDim.x} * blockDim.x / 32;
  unsigned char* mine = stage + size_t{wib} * kTmaPieces * granule;
  const uint32_t bar = smem_addr(&bars[wib]);
  if (lane == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncwarp();
  uint32_t acc = 0;
  for (uint64_t r = 0; r < rounds; ++r) {
    if (lane == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(kTmaPieces * granule) : "memory");
      for (int j = 0; j < kTmaPieces; ++j) {
        const uint64_t p = (r * warps + warp) * kTmaPieces + j;
        const unsigned char* src = base + piece_at(p, pieces, pattern, batch) * granule;
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                         smem_addr(mine + j * granule)),
                     "l"(src), "r"(granule), "r"(bar)
                     : "memory");
      }
    }
    uint32_t done = 0;
    while (!done)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done)
                   : "r"(bar), "r"(static_cast<uint32_t>(r & 1))
                   : "memory");
    acc ^= mine[lane * 4];
    __syncwarp();
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1ull);
}

struct Region {
  std::string kind;
  unsigned char* ptr = nullptr;
  size_t bytes = 0;
  bool registered = false, host_alloc = false;
  int fd = -1;
  std::string path;
};

size_t huge_kib_of(const void* p) {
  // AnonHugePages, ShmemPmdMapped, FilePmdMapped and hugetlb sizes of the mapping holding p.
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  const uintptr_t want = reinterpret_cast<uintptr_t>(p);
  bool in = false;
  size_t kib = 0;
  while (std::getline(smaps, line)) {
    uintptr_t lo, hi;
    char perms[8];
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) == 3 && line.find(" kB") == std::string::npos) {
      in = lo <= want && want < hi;  // a mapping's header line
      continue;
    }
    size_t v;
    char name[64];
    if (in && std::sscanf(line.c_str(), "%63[^:]: %zu kB", name, &v) == 2) {
      const std::string n = name;
      if (n == "AnonHugePages" || n == "ShmemPmdMapped" || n == "FilePmdMapped" || n == "Private_Hugetlb" ||
          n == "Shared_Hugetlb")
        kib += v;
    }
  }
  return kib;
}

Region make_region(const std::string& kind, size_t bytes, const std::string& hugetlbfs) {
  Region r;
  r.kind = kind;
  r.bytes = bytes;
  if (kind == "hostalloc") {
    void* p;
    check(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc");
    r.ptr = static_cast<unsigned char*>(p);
    r.host_alloc = true;
    std::memset(p, 1, bytes);
    return r;
  }
  void* p = MAP_FAILED;
  if (kind == "thp") {
    const size_t align = size_t{2} << 20;
    void* raw = mmap(nullptr, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return r;
    p = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(raw) + align - 1) & ~(align - 1));
    madvise(p, bytes, MADV_HUGEPAGE);
  } else {
    r.path = kind == "hugetlbfs" ? hugetlbfs + "/host_pages_bench" : "/dev/shm/host_pages_bench";
    if (kind == "hugetlbfs" && hugetlbfs.empty()) return r;
    r.fd = open(r.path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (r.fd < 0 || ftruncate(r.fd, static_cast<off_t>(bytes)) != 0) {
      std::perror(r.path.c_str());
      return r;
    }
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd, 0);
    if (p == MAP_FAILED) {
      std::perror("mmap");
      return r;
    }
    if (kind == "shm-advise") madvise(p, bytes, MADV_HUGEPAGE);
  }
  std::memset(p, 1, bytes);
  r.ptr = static_cast<unsigned char*>(p);
  cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: cudaHostRegister: %s\n", kind.c_str(), cudaGetErrorString(e));
    r.ptr = nullptr;
    return r;
  }
  r.registered = true;
  return r;
}

void free_region(Region& r) {
  if (r.host_alloc) cudaFreeHost(r.ptr);
  if (r.registered) {
    cudaHostUnregister(r.ptr);
    munmap(r.ptr, r.bytes);
  }
  if (r.fd >= 0) {
    close(r.fd);
    unlink(r.path.c_str());
  }
}

// The ways of touching host memory: reads (bulk copies, or loads with ILP 1 or 4) and stores.
enum Reader : int { kTma, kIlp1, kIlp4, kStore, kStoreFence };

// GB/s of one reader over a region.
double read_rate(const Region& r, uint32_t granule, Reader reader, int pattern, uint64_t batch, int sms,
                 unsigned long long* sink) {
  unsigned char* dev;
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), r.ptr, 0), "cudaHostGetDevicePointer");
  const int block = 256;
  const size_t smem = size_t{kTmaWarps} * kTmaPieces * granule;
  if (reader == kTma) cudaFuncSetAttribute(tma_reads, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  // As many blocks as are resident at once, so that round-major numbering is the order in time.
  int per_sm = 0;
  switch (reader) {
    case kTma: cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, tma_reads, block, smem); break;
    case kIlp1: cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, load_reads<1>, block, 0); break;
    case kIlp4: cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, load_reads<4>, block, 0); break;
    case kStore: cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, store_writes<false>, block, 0); break;
    case kStoreFence: cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, store_writes<true>, block, 0); break;
  }
  const int blocks = sms * std::max(per_sm, 1);
  const uint64_t warps = uint64_t(blocks) * block / 32, pieces = r.bytes / granule;
  const uint64_t per_round = reader == kTma    ? kTmaPieces
                             : reader == kIlp1 ? 512 / granule
                             : reader == kIlp4 ? 4 * (512 / granule)
                                               : 256 / granule;
  // About 1 GiB read; stores, a sixteenth of that.
  const uint64_t total = reader == kStore || reader == kStoreFence ? uint64_t{1} << 26 : uint64_t{1} << 30;
  const uint64_t rounds = std::max<uint64_t>(1, total / granule / (warps * per_round));
  const double bytes = double(warps) * rounds * per_round * granule;
  auto launch = [&](uint64_t n) {
    switch (reader) {
      case kTma: tma_reads<<<blocks, block, smem>>>(dev, pieces, granule, n, pattern, batch, sink); break;
      case kIlp1: load_reads<1><<<blocks, block>>>(dev, pieces, granule, n, pattern, batch, sink); break;
      case kIlp4: load_reads<4><<<blocks, block>>>(dev, pieces, granule, n, pattern, batch, sink); break;
      case kStore: store_writes<false><<<blocks, block>>>(dev, pieces, granule, n, pattern, batch); break;
      case kStoreFence: store_writes<true><<<blocks, block>>>(dev, pieces, granule, n, pattern, batch); break;
    }
  };
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  launch(2);  // warm-up
  cudaEventRecord(a);
  launch(rounds);
  cudaEventRecord(b);
  check(cudaEventSynchronize(b), "reads");
  float ms;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return bytes / (ms / 1e3) / 1e9;
}

std::vector<size_t> parse_list(const std::string& s) {
  std::vector<size_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoull(item));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string sizes_s = "64,1024,8192", granules_s = "32,128,256", kinds_s = "shm,thp,hostalloc,hugetlbfs",
              patterns_s = "random", readers_s = "ilp1,ilp4", hugetlbfs, json_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--sizes") sizes_s = v;
    else if (k == "--granules") granules_s = v;
    else if (k == "--kinds") kinds_s = v;
    else if (k == "--patterns") patterns_s = v;  // random, sequential, sorted:BATCH
    else if (k == "--readers") readers_s = v;    // ilp1, ilp4, tma, st, st-fence
    else if (k == "--hugetlbfs") hugetlbfs = v;
    else if (k == "--json") json_path = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  auto split = [](const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) v.push_back(item);
    return v;
  };
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  unsigned long long* sink;
  check(cudaMalloc(&sink, sizeof *sink), "cudaMalloc");
  std::string json = "[\n";
  // The link's ceiling: a pinned 1 GiB host-to-device copy.
  {
    const size_t bytes = size_t{1} << 30;
    void *h, *d;
    check(cudaHostAlloc(&h, bytes, 0), "cudaHostAlloc");
    check(cudaMalloc(&d, bytes), "cudaMalloc");
    std::memset(h, 1, bytes);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    cudaEventRecord(a);
    for (int i = 0; i < 4; ++i) cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    const double gbps = 4.0 * bytes / (ms / 1e3) / 1e9;
    std::printf("copy: pinned host-to-device 1 GiB: %.1f GB/s\n", gbps);
    json += "  {\"kind\": \"copy\", \"gbps\": " + std::to_string(gbps) + "}";
    cudaFreeHost(h);
    cudaFree(d);
  }
  for (const std::string& kind : split(kinds_s)) {
    for (size_t mib : parse_list(sizes_s)) {
      Region r = make_region(kind, mib << 20, hugetlbfs);
      if (!r.ptr) {
        std::printf("%-10s %6zu MiB: not available\n", kind.c_str(), mib);
        free_region(r);
        continue;
      }
      const double huge = double(huge_kib_of(r.ptr)) / (r.bytes >> 10);
      for (size_t granule : parse_list(granules_s))
        for (const std::string& pattern : split(patterns_s))
          for (const std::string& reader : split(readers_s)) {
            const int pat = pattern == "random" ? kRandom : pattern == "sequential" ? kSequential : kSorted;
            const uint64_t batch = pat == kSorted ? std::stoull(pattern.substr(pattern.find(':') + 1)) : 1;
            const Reader how = reader == "tma"        ? kTma
                               : reader == "ilp4"     ? kIlp4
                               : reader == "st"       ? kStore
                               : reader == "st-fence" ? kStoreFence
                                                      : kIlp1;
            if (pat == kSorted && (batch == 0 || batch > r.bytes / granule)) continue;
            // Loads split a piece over lanes of one warp instruction (16 to 512 bytes), stores (8
            // to 256 bytes, a power of two); bulk copies take any multiple of 16 that fits the
            // shared memory.
            const bool stores = how == kStore || how == kStoreFence;
            const bool fits = stores ? granule >= 8 && granule <= 256 && (granule & (granule - 1)) == 0
                                     : granule % 16 == 0 && granule <= (how == kTma ? 1024u : 512u);
            if (!fits) {
              std::printf("granule %zu B: not measured by %s\n", granule, reader.c_str());
              continue;
            }
            const double gbps = read_rate(r, uint32_t(granule), how, pat, batch, sms, sink);
            std::printf("%-10s %6zu MiB  huge %5.1f%%  %-16s %-4s granule %3zu B: %6.1f GB/s  %7.1f M pieces/s\n",
                        kind.c_str(), mib, 100 * huge, pattern.c_str(), reader.c_str(), granule, gbps, gbps * 1e3 / granule);
            std::fflush(stdout);
            json += ",\n  {\"kind\": \"" + kind + "\", \"mib\": " + std::to_string(mib) + ", \"huge_fraction\": " +
                    std::to_string(huge) + ", \"pattern\": \"" + pattern + "\", \"reader\": \"" + reader +
                    "\", \"granule\": " + std::to_string(granule) + ", \"gbps\": " + std::to_string(gbps) + "}";
          }
      free_region(r);
    }
  }
  json += "\n]\n";
  if (!json_path.empty()) std::ofstream(json_path) << json;
  return 0;
}
